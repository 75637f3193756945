// Backends this build does not have are refused by name (the CUDA one lives in cuda/cuda_backend.cc).
#include "backend/backend.h"
#include "base/error.h"

namespace duet::backend {

#if !DUET_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int) {
  fail("this duet was built without the CUDA backend (nvcc was not found when it was configured); use --backend cpu");
}
bool cuda_backend_available() { return false; }
#endif

}  // namespace duet::backend
