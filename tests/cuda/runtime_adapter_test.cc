// The runtime adapter suite (tests/convert/runtime_adapter_suite.h) on the CUDA backend: the same gate against the
// merged checkpoint (served on CUDA too), the same planted controls, chat bytes with and without --clef, and four
// adapted decisions at once equal to each alone. Skipped, with the reason, without a GPU.
#include <string_view>
namespace duet::model {
namespace {
constexpr std::string_view kAdapterBackend = "cuda";
}  // namespace
}  // namespace duet::model
#include "../convert/runtime_adapter_suite.h"
