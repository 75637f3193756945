// libFuzzer's entry points for every target of fuzz_targets.h: LLVMFuzzerInitialize picks the one the environment's
// DUET_FUZZ_TARGET names (the names scripts/fuzz.sh uses, e.g. json_body_fuzz) and refuses to start without one, so a
// run never fuzzes a target other than the one it reports; with DUET_FUZZ_LIST set it prints the names and exits.
#include "fuzz_targets.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

using Target = int (*)(const uint8_t*, size_t);
struct NamedTarget {
  std::string_view name;
  Target target;
};
constexpr NamedTarget kTargets[] = {
    {"request_reader_fuzz", duet::fuzz::request_reader},
    {"json_body_fuzz", duet::fuzz::json_body},
    {"tool_call_fuzz", duet::fuzz::tool_call},
    {"chat_request_fuzz", duet::fuzz::chat_request},
    {"responses_request_fuzz", duet::fuzz::responses_request},
    {"messages_request_fuzz", duet::fuzz::messages_request},
    {"systemone_request_fuzz", duet::fuzz::systemone_request},
    {"image_decode_fuzz", duet::fuzz::image_decode},
};
Target chosen = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (std::getenv("DUET_FUZZ_LIST") != nullptr) {  // the targets' names, one a line (scripts/fuzz.sh, sanitize.sh)
    for (const NamedTarget& t : kTargets) std::printf("%.*s\n", static_cast<int>(t.name.size()), t.name.data());
    std::exit(0);
  }
  const char* name = std::getenv("DUET_FUZZ_TARGET");
  for (const NamedTarget& t : kTargets)
    if (name != nullptr && t.name == name) chosen = t.target;
  if (chosen == nullptr) {
    std::fprintf(stderr, "fuzz_targets: set DUET_FUZZ_TARGET to one of:");
    for (const NamedTarget& t : kTargets) std::fprintf(stderr, " %.*s", static_cast<int>(t.name.size()), t.name.data());
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return chosen(data, size); }
