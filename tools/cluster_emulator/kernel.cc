// sampling.cu's kernel on the cluster emulator (emu_runtime.h): the kernel's sources as run.sh copies them (the cluster
// barrier's inline PTX and the dynamic shared memory declaration replaced by the emulator's calls), compiled for the
// host. With EMU_EXP_SALT set, CUDA's exp is stood in for by glibc's nudged by one ulp on a deterministic part of the
// inputs (a hash of the argument's bits and the salt), so that rows can take the paths the device's last-ulp
// differences would send them down.
#define EMU_DEVICE_MACROS
#include "emu_runtime.h"
double emu_exp(double d);
namespace duet::backend::cuda {
inline double exp(double d) { return emu_exp(d); }
}  // namespace duet::backend::cuda
#include "backend/cuda/sampling.cu"
double emu_exp(double d) {
  double w = ::exp(d);
  static const char* salt_text = std::getenv("EMU_EXP_SALT");
  if (salt_text == nullptr) return w;
  static const uint64_t salt = std::strtoull(salt_text, nullptr, 10);
  uint64_t b;
  std::memcpy(&b, &d, 8);
  b ^= b >> 29;
  b *= 0xbf58476d1ce4e5b9ull;
  b ^= b >> 32;
  b ^= salt * 0x9e3779b97f4a7c15ull;
  b *= 0x94d049bb133111ebull;
  if (w > 0 && w < 1 && (b >> 62) != 0) w = std::nextafter(w, (b >> 62) == 1 ? 2.0 : 0.0);
  return w;
}
