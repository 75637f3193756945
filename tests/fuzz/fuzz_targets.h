#pragma once
// The libFuzzer targets, one binary (fuzz_targets): each target's file defines its function here, and
// fuzz_targets.cc's entry point calls the one DUET_FUZZ_TARGET names (scripts/fuzz.sh sets it). One binary instead of
// eight: the headers they share (nlohmann/json, the request parsers) compile once and one executable links, which
// took about 30 CPU s off the sanitizer build (docs/benchmarks.md, "Build time", eleventh pass). Each returns 0 and
// reports a finding by aborting or trapping, as a libFuzzer target does.
#include <cstddef>
#include <cstdint>

namespace duet::fuzz {

int chat_request(const uint8_t* data, size_t size);
int image_decode(const uint8_t* data, size_t size);
int json_body(const uint8_t* data, size_t size);
int messages_request(const uint8_t* data, size_t size);
int request_reader(const uint8_t* data, size_t size);
int responses_request(const uint8_t* data, size_t size);
int systemone_request(const uint8_t* data, size_t size);
int tool_call(const uint8_t* data, size_t size);

}  // namespace duet::fuzz
