#include "backend/cuda/dependent_launch.h"

#include <cstdlib>
#include <cstring>

namespace duet::backend::cuda {

cudaLaunchAttribute dependent_launch_attribute() {
  static const bool enabled = [] {
    const char* v = std::getenv("DUET_CUDA_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = enabled ? 1 : 0;
  return a;
}

}  // namespace duet::backend::cuda
