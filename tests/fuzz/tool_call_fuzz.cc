// A libFuzzer target (fuzz_targets.h): model output through the chat output parser (reasoning, content, <tool_call>
// blocks in the XML or the JSON form, `arguments` strings holding JSON), pushed in pieces whose size the first byte
// picks, with a tool whose schema types its parameters. Parsed arguments are written out as the routes do (dump
// recurses per level).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_targets.h"
#include "server/tool_call_parser.h"

namespace {
const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
  "parameters": {"type": "object", "properties": {"a": {"type": "object"}, "b": {"type": ["array", "null"]},
  "n": {"type": "integer"}, "s": {"type": "string"}}}}}])");
}

int duet::fuzz::tool_call(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 32;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  duet::server::ChatOutputParser parser(data[0] & 0x80, /*parse_tools=*/true, kTools);
  size_t written = 0;
  auto take = [&](const std::vector<duet::server::OutputPiece>& pieces) {
    for (const auto& piece : pieces)
      written += piece.text.size() +
                 piece.call.arguments.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  };
  for (size_t at = 0; at < text.size(); at += step) take(parser.push(text.substr(at, step)));
  take(parser.finish());
  return written == 0 ? 0 : 0;
}
