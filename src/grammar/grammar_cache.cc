#include "grammar/grammar_cache.h"

#include "base/sha256.h"

namespace duet::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity)
    : vocabulary_(std::move(vocabulary)), capacity_(capacity) {}

template <typename Compile>
std::shared_ptr<const CompiledGrammar> GrammarCache::get(const std::string& key, std::vector<std::string>* ignored,
                                                         Compile compile) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      ages_.splice(ages_.begin(), ages_, it->second.age);
      ++hits_;
      if (ignored) *ignored = it->second.ignored;
      return it->second.grammar;
    }
  }
  // Compiled outside the lock: a large schema does not hold up other requests (two racing compiles of one schema
  // give equal grammars; the second is kept).
  std::vector<std::string> left_out;
  auto grammar = std::make_shared<const CompiledGrammar>(compile(left_out), vocabulary_);
  ++misses_;
  if (ignored) *ignored = left_out;
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    ages_.erase(it->second.age);
    entries_.erase(it);
  }
  ages_.push_front(key);
  entries_[key] = Entry{grammar, std::move(left_out), ages_.begin()};
  while (entries_.size() > capacity_) {
    entries_.erase(ages_.back());
    ages_.pop_back();
  }
  return grammar;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::for_schema(const nlohmann::ordered_json& schema,
                                                                const SchemaOptions& options,
                                                                std::vector<std::string>* ignored) {
  // The text keeps the schema's key order, which decides the order properties are written in.
  const std::string key =
      sha256_hex(std::string(options.strict ? "schema/strict\n" : "schema/loose\n") + schema.dump());
  return get(key, ignored, [&](std::vector<std::string>& left_out) {
    SchemaGrammar compiled = grammar_from_schema(schema, options);
    left_out = std::move(compiled.ignored);
    return std::move(compiled.grammar);
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCache::for_tool_calls(const ToolCallSpec& spec,
                                                                    std::vector<std::string>* ignored) {
  const std::string key = sha256_hex(fmt::format("tool_calls/{}/{}/{}\n{}", static_cast<int>(spec.start), spec.parallel,
                                                 spec.function, spec.tools.dump()));
  return get(key, ignored, [&](std::vector<std::string>& left_out) {
    SchemaGrammar compiled = tool_call_grammar(spec);
    left_out = std::move(compiled.ignored);
    return std::move(compiled.grammar);
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCache::for_any_object() {
  return get("json_object", nullptr, [](std::vector<std::string>&) { return any_object_grammar(); });
}

}  // namespace duet::grammar
