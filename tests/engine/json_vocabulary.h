#pragma once
// The JSON-flavoured vocabulary (and two schemas' grammars over it) the structured-output engine tests give the tiny
// model's 512 ids (its tokenizer's own pieces would make few JSON documents): printable ASCII for ids 0-94, then pairs
// of JSON fragments, each once, up to kStop, an id with no bytes (only ever a stop token). Shared by the CPU tests
// (constrained_steps_test.cc) and the GPU's (tests/cuda/masked_steps_test.cc).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/vocabulary.h"

namespace duet::engine::testing {

constexpr int32_t kStop = 511;  // no bytes: only ever a stop token

inline std::shared_ptr<const grammar::Vocabulary> json_vocabulary(int32_t width) {
  const std::vector<std::string> fragments = {"{\"", "\":",   "\",\"", "\"",    "[",    "]", "}",   ",",   "\"]",
                                              "\"}", "[\"",   "true",  "false", "null", "1", "23",  "0.5", "-",
                                              "ab",  "title", "notes", "x",     " ",    "e", "\\n", "é",   "ok"};
  std::vector<std::pair<int32_t, std::string>> tokens;
  std::set<std::string> seen;
  for (int32_t id = 0; id < 95; ++id) {
    tokens.emplace_back(id, std::string(1, static_cast<char>(32 + id)));
    seen.insert(tokens.back().second);
  }
  std::mt19937 rng(5);
  for (int32_t id = 95; id < kStop;) {
    std::string bytes = fragments[rng() % fragments.size()] + fragments[rng() % fragments.size()];
    if (!seen.insert(bytes).second) continue;
    tokens.emplace_back(id++, std::move(bytes));
  }
  return std::make_shared<const grammar::Vocabulary>(std::move(tokens), width);
}

// An object of a title of up to 6 characters and up to three notes of up to 4, over json_vocabulary(width).
inline std::shared_ptr<const grammar::CompiledGrammar> notes_grammar(int32_t width) {
  const auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"title": {"type": "string",
      "maxLength": 6}, "notes": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}},
      "required": ["title", "notes"], "additionalProperties": false})");
  return std::make_shared<const grammar::CompiledGrammar>(grammar::grammar_from_schema(schema).grammar,
                                                          json_vocabulary(width));
}

// An integer: a document that may end after any digit, so the stop token competes with more digits.
inline std::shared_ptr<const grammar::CompiledGrammar> integer_grammar(int32_t width) {
  return std::make_shared<const grammar::CompiledGrammar>(
      grammar::grammar_from_schema(nlohmann::ordered_json::parse(R"({"type": "integer"})")).grammar,
      json_vocabulary(width));
}

}  // namespace duet::engine::testing
