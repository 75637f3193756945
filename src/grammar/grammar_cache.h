#pragma once
// Compiled grammars by what they were compiled from (a hash of the mode, the strictness and the schema's text), for
// one vocabulary: a schema a client sends with every request is compiled once, and its node answers (filled as
// masks need them) serve every later request. Least recently used entries go past `capacity`.
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/tool_call_grammar.h"

namespace duet::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity = 256);

  // Throws SchemaError naming the schema path of what is refused. `ignored` (when given) receives what a non-strict
  // compile left out.
  std::shared_ptr<const CompiledGrammar> for_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options,
                                                    std::vector<std::string>* ignored = nullptr);
  std::shared_ptr<const CompiledGrammar> for_any_object();
  // A request's tool calls held to their schemas (tool_call_grammar.h); throws SchemaError like for_schema.
  std::shared_ptr<const CompiledGrammar> for_tool_calls(const ToolCallSpec& spec,
                                                        std::vector<std::string>* ignored = nullptr);

  const Vocabulary& vocabulary() const { return *vocabulary_; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::vector<std::string> ignored;
    std::list<std::string>::iterator age;
  };
  template <typename Compile>
  std::shared_ptr<const CompiledGrammar> get(const std::string& key, std::vector<std::string>* ignored,
                                             Compile compile);

  std::shared_ptr<const Vocabulary> vocabulary_;
  size_t capacity_;
  std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> ages_;  // most recently used first
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

}  // namespace duet::grammar
