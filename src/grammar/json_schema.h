#pragma once
// JSON Schema (the subset clients send: docs/api.md lists it) compiled to a Grammar of the documents that validate,
// written in one compact form (no whitespace, properties in the schema's order, optional ones present or not).
// Every document the grammar admits validates against the schema; some valid documents are never written (other
// property orders, extra properties when additionalProperties is not false, exponents on bounded numbers).
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "grammar/char_set.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"

namespace duet::grammar {

// A schema duet cannot honour: `path` is the JSON pointer of the schema object that holds the keyword.
class SchemaError : public Error {
 public:
  SchemaError(std::string path, std::string message)
      : Error(fmt::format("{}: {}", path.empty() ? "#" : path, message)),
        path_(std::move(path)),
        message_(std::move(message)) {}
  const std::string& path() const { return path_; }
  const std::string& message() const { return message_; }  // without the path

 private:
  std::string path_;
  std::string message_;
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

// How a schema's strings are written as raw text (a tool call's string parameters, which the template writes
// unquoted): `any` for a string the schema says nothing more of, `bounded` spelling each character where lengths or a
// pattern count them; `allows` says whether an enum or const value may be written.
struct RawText {
  Expr any;
  CharWriter bounded;
  std::function<bool(const std::string&)> allows;
};

class Compiler;
// Several schemas compiled into one grammar (a tool call holds one schema per parameter, $refs resolved against
// `root`): a subschema's value as compact JSON (strings spelled by `write`), or its string values as raw text.
class SchemaCompiler {
 public:
  SchemaCompiler(const nlohmann::ordered_json& root, const SchemaOptions& options, GrammarBuilder& builder,
                 CharWriter write = json_string_char);
  ~SchemaCompiler();
  Expr value(const nlohmann::ordered_json& schema, const std::string& path);
  Expr text(const nlohmann::ordered_json& schema, const std::string& path, const RawText& raw);
  const std::vector<std::string>& ignored() const;

 private:
  std::unique_ptr<Compiler> impl_;
};

// The JSON types a schema admits as far as `type`, `enum`, `const`, `anyOf` / `oneOf` and `$ref` (into `root`) say;
// nullopt when they say nothing (any type).
std::optional<std::set<std::string>> admitted_types(const nlohmann::ordered_json& schema,
                                                    const nlohmann::ordered_json& root, int depth = 0);
// Whether a value of the schema may be a string (admitted_types has "string" or says nothing).
bool admits_string(const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root);
// json_object mode: any JSON object.
Grammar any_object_grammar();

}  // namespace duet::grammar
