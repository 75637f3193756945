// The runtime adapter suite (runtime_adapter_suite.h) on the CPU backend, in CI.
#include <string_view>
namespace duet::model {
namespace {
constexpr std::string_view kAdapterBackend = "cpu";
}  // namespace
}  // namespace duet::model
#include "runtime_adapter_suite.h"
