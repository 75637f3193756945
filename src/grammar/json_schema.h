#pragma once
// JSON Schema (the subset clients send: docs/api.md lists it) compiled to a Grammar of the documents that validate,
// written in one compact form (no whitespace, properties in the schema's order, optional ones present or not).
// Every document the grammar admits validates against the schema; some valid documents are never written (other
// property orders, extra properties when additionalProperties is not false, exponents on bounded numbers).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "grammar/grammar.h"

namespace duet::grammar {

// A schema duet cannot honour: `path` is the JSON pointer of the schema object that holds the keyword.
class SchemaError : public Error {
 public:
  SchemaError(std::string path, const std::string& message)
      : Error(fmt::format("{}: {}", path.empty() ? "#" : path, message)), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct SchemaOptions {
  // strict: a keyword duet cannot honour is refused (SchemaError). Not strict: it is ignored and listed.
  bool strict = true;
};

struct SchemaGrammar {
  Grammar grammar;
  std::vector<std::string> ignored;  // "path: keyword" of what a non-strict compile left out
};

SchemaGrammar grammar_from_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options = {});
// json_object mode: any JSON object.
Grammar any_object_grammar();

}  // namespace duet::grammar
