#include "grammar/tool_call_grammar.h"

#include <fmt/format.h>

#include "grammar/grammar_builder.h"
#include "grammar/plain_text.h"
#include "grammar/terminals.h"

namespace duet::grammar {

namespace {

using Json = nlohmann::ordered_json;

// What ends a raw value for the parser (a value is cut at the first of these), so a value never spells them.
const std::vector<std::string> kValueEnds = {"</parameter>", "<parameter=", "</function>", "</tool_call>"};

// A JSON string inside a parameter: no '<', so no tag can appear in it.
Expr json_char_without_tags(const CharSet& set) { return json_string_char(set.minus(CharSet::of('<'))); }
Expr raw_char_without_tags(const CharSet& set) { return utf8_char(set.minus(CharSet::of('<'))); }

const Json& function_of(const Json& tool) { return tool.at("function"); }
std::string name_of(const Json& tool) { return function_of(tool).value("name", std::string()); }
bool is_strict(const Json& tool) {
  const auto it = function_of(tool).find("strict");
  return it != function_of(tool).end() && it->is_boolean() && it->get<bool>();
}

class ToolCallCompiler {
 public:
  explicit ToolCallCompiler(const ToolCallSpec& spec) : spec_(spec) {
    raw_.any = text_avoiding(kValueEnds);
    raw_.bounded = raw_char_without_tags;
    raw_.allows = [](const std::string& v) { return v.find('<') == std::string::npos; };
  }

  SchemaGrammar run() {
    std::vector<Expr> calls;  // each function's call after "<tool_call>\n"
    Expr named_arguments;
    for (size_t i = 0; i < spec_.tools.size(); ++i) {
      const Json& tool = spec_.tools[i];
      const std::string at = fmt::format("tools[{}].function.parameters", i);
      if (spec_.start == ToolCallSpec::Start::arguments && name_of(tool) != spec_.function) continue;
      try {
        Expr rest = seq({arguments_of(tool, at), literal("</function>\n"), terminal(Terminal::tool_call_close)});
        if (spec_.start == ToolCallSpec::Start::arguments) named_arguments = rest;
        calls.push_back(seq({literal("<function=" + name_of(tool) + ">\n"), std::move(rest)}));
      } catch (const SchemaError& e) {
        throw SchemaError(at + e.path(), e.message());
      }
    }
    if (calls.empty()) throw SchemaError("tools", "no function to call");
    const Expr function = calls.size() == 1 ? calls[0] : alt(std::move(calls));
    const Expr call = seq({terminal(Terminal::tool_call_open), byte_of('\n'), function});
    const Expr more = spec_.parallel ? star(seq({byte_of('\n'), call})) : empty();
    Expr root;
    switch (spec_.start) {
      case ToolCallSpec::Start::reply:
        root = seq({text_avoiding({std::string(kTerminalText[0])}), optional(seq({call, more}))});
        break;
      case ToolCallSpec::Start::call:
        root = seq({function, more});
        break;
      case ToolCallSpec::Start::arguments:
        if (!named_arguments)
          throw SchemaError("tool_choice", fmt::format("`{}` is not one of the tools", spec_.function));
        root = seq({named_arguments, more});
        break;
    }
    const int32_t rule = builder_.declare("tool_calls");
    builder_.define(rule, root);
    return {builder_.build(rule), std::move(ignored_)};
  }

 private:
  // "<parameter=P>\nVALUE\n</parameter>\n" for each property in the schema's order (the required ones always).
  Expr arguments_of(const Json& tool, const std::string& at) {
    const std::string name = name_of(tool);
    if (name.empty() || name.find_first_of("<>\n") != std::string::npos)
      throw SchemaError("", fmt::format("the function name \"{}\" cannot be written in a call", name));
    const auto p = function_of(tool).find("parameters");
    if (p == function_of(tool).end() || p->is_null()) return empty();
    const Json& parameters = *p;
    const SchemaOptions options{.strict = is_strict(tool)};
    SchemaCompiler compiler(parameters, options, builder_, json_char_without_tags);
    const auto keep_ignored = [&] {
      for (const std::string& what : compiler.ignored()) ignored_.push_back(at + what);
    };
    const bool object_like = parameters.is_object() && !parameters.contains("$ref") && !parameters.contains("anyOf") &&
                             !parameters.contains("oneOf") && !parameters.contains("allOf") &&
                             parameters.value("type", Json("object")) == Json("object");
    if (!object_like) {
      if (options.strict) throw SchemaError("", "a strict tool's parameters must be an object schema with properties");
      ignored_.push_back(at + ": not an object schema with properties");
      return any_arguments();
    }
    std::vector<std::string> required;
    for (const Json& r : parameters.value("required", Json::array()))
      if (r.is_string()) required.push_back(r.get<std::string>());
    const Json properties = parameters.value("properties", Json::object());
    const Json additional = parameters.value("additionalProperties", Json(true));
    std::vector<Expr> members;
    const auto member = [&](const std::string& key, const Json& schema, const std::string& path, bool needed) {
      if (key.empty() || key.find_first_of("<>\n") != std::string::npos) {
        if (needed || options.strict)
          throw SchemaError(path, fmt::format("the parameter name \"{}\" cannot be written in a call", key));
        ignored_.push_back(at + path + ": a name a call cannot hold");
        return;
      }
      const Expr value =
          admits_string(schema, parameters) ? compiler.text(schema, path, raw_) : compiler.value(schema, path);
      const Expr written = seq({literal("<parameter=" + key + ">\n"), value, literal("\n</parameter>\n")});
      members.push_back(needed ? written : optional(written));
    };
    for (auto it = properties.begin(); it != properties.end(); ++it) {
      const bool needed = std::find(required.begin(), required.end(), it.key()) != required.end();
      member(it.key(), it.value(), "/properties/" + it.key(), needed);
    }
    for (const std::string& name : required)
      if (!properties.contains(name)) {
        if (additional == Json(false))
          throw SchemaError("", fmt::format("\"{}\" is required but additionalProperties is false", name));
        member(name, additional.is_boolean() ? Json::object() : additional, "/additionalProperties", true);
      }
    keep_ignored();
    return seq(std::move(members));
  }

  // Parameters of a schema duet cannot read (non-strict only): any names, raw text values.
  Expr any_arguments() {
    const Expr name = repeat(
        utf8_char(CharSet::any().minus(CharSet::of('<')).minus(CharSet::of('>')).minus(CharSet::of('\n'))), 1, 64);
    return star(seq({literal("<parameter="), name, literal(">\n"), raw_.any, literal("\n</parameter>\n")}));
  }

  const ToolCallSpec& spec_;
  GrammarBuilder builder_;
  RawText raw_;
  std::vector<std::string> ignored_;
};

}  // namespace

SchemaGrammar tool_call_grammar(const ToolCallSpec& spec) { return ToolCallCompiler(spec).run(); }

bool parameter_written_as_text(const nlohmann::ordered_json& parameters, const std::string& name) {
  if (!parameters.is_object()) return true;
  const auto properties = parameters.find("properties");
  if (properties == parameters.end() || !properties->is_object()) return true;
  const auto property = properties->find(name);
  if (property == properties->end()) return true;
  return admits_string(*property, parameters);
}

bool has_strict_tool(const nlohmann::ordered_json& tools) {
  if (!tools.is_array()) return false;
  for (const Json& tool : tools)
    if (tool.is_object() && tool.contains("function") && tool["function"].is_object() && is_strict(tool)) return true;
  return false;
}

}  // namespace duet::grammar
