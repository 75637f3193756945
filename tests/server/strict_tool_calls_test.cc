// Strict tool calls below HTTP: random walks through the tool-call grammar on the demo model's vocabulary (every mask
// checked against the one-token check), each finished reply parsed by the server's own output parser, and every
// call's arguments validated by ajv against its tool's parameters. The tags are single tokens: "<tool_call>" comes
// only as the added token, never spelled out in bytes.
#include <gtest/gtest.h>

#include "../grammar/corpus.h"
#include "../grammar/walk.h"
#include "grammar/grammar_cache.h"
#include "grammar/terminals.h"
#include "server/tool_call_parser.h"

namespace duet::testing {
namespace {

const OrderedJson kTools = OrderedJson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"type": "string", "enum": ["c", "f"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 14},
      "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
      "note": {"type": "string"}},
    "required": ["city", "unit", "days", "when"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "book", "strict": true, "parameters": {"type": "object",
    "$defs": {"guest": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
      "age": {"type": ["integer", "null"], "minimum": 0, "maximum": 99}}, "required": ["name", "age"],
      "additionalProperties": false}},
    "properties": {"guests": {"type": "array", "items": {"$ref": "#/$defs/guest"}, "minItems": 1, "maxItems": 2},
      "nights": {"type": "number", "minimum": 0.5, "maximum": 30}, "breakfast": {"type": "boolean"},
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2}$"}, "level": {"enum": [1, 2, 3]}},
    "required": ["guests", "nights", "breakfast", "code", "level"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
])");

// Free text, then calls or nothing (tool_choice auto with a strict tool).
grammar::ToolCallSpec reply_spec(const OrderedJson& tools) {
  return {.tools = tools, .start = grammar::ToolCallSpec::Start::reply, .function = "", .parallel = true};
}

// The reply's text as the tokenizer writes it: terminal bytes are the tags.
std::string as_text(const std::string& document) {
  std::string out;
  for (char c : document) {
    const auto b = static_cast<uint8_t>(c);
    if (b == grammar::terminal_byte(grammar::Terminal::tool_call_open))
      out += grammar::kTerminalText[0];
    else if (b == grammar::terminal_byte(grammar::Terminal::tool_call_close))
      out += grammar::kTerminalText[1];
    else
      out += c;
  }
  return out;
}

const OrderedJson& parameters_of(const std::string& name) {
  for (const auto& t : kTools)
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  throw std::runtime_error("no tool " + name);
}

struct Walked {
  std::vector<std::pair<OrderedJson, std::string>> cases;  // (parameters, arguments) for ajv
  std::vector<std::string> names;
  int replies = 0, with_calls = 0;
};

void walk_mode(grammar::GrammarCache& cache, const grammar::ToolCallSpec& spec, const std::string& forced, int seeds,
               Walked& out) {
  const auto g = cache.for_tool_calls(spec);
  for (uint32_t seed = 1; seed <= static_cast<uint32_t>(seeds); ++seed) {
    SCOPED_TRACE("start " + std::to_string(static_cast<int>(spec.start)) + " seed " + std::to_string(seed));
    const WalkResult w = random_walk(g, seed, 700, 3);
    if (!w.finished) continue;
    ++out.replies;
    const std::string text = as_text(w.document);
    const auto parsed = server::parse_chat_output(text, false, true, kTools, forced);
    if (!parsed.tool_calls.empty()) ++out.with_calls;
    if (spec.start != grammar::ToolCallSpec::Start::reply) {
      EXPECT_FALSE(parsed.tool_calls.empty()) << forced << text;
    }
    for (const auto& call : parsed.tool_calls) {
      if (spec.start == grammar::ToolCallSpec::Start::arguments) {
        EXPECT_EQ(call.name, spec.function);
      }
      out.cases.emplace_back(parameters_of(call.name), call.arguments.dump());
      out.names.push_back(call.name + " from " + forced + text);
    }
  }
}

TEST(StrictToolCalls, WalkedCallsParseAndValidate) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  Walked walked;
  using Start = grammar::ToolCallSpec::Start;
  walk_mode(cache, {.tools = kTools, .start = Start::call, .function = "", .parallel = true}, "<tool_call>\n", 8,
            walked);
  walk_mode(cache, {.tools = kTools, .start = Start::arguments, .function = "book", .parallel = false},
            "<tool_call>\n<function=book>\n", 6, walked);
  walk_mode(cache, {.tools = kTools, .start = Start::reply, .function = "", .parallel = true}, "", 8, walked);
  EXPECT_GE(walked.replies, 18);
  EXPECT_GE(walked.cases.size(), 14u);
  const auto verdicts = ajv_validate(walked.cases);
  ASSERT_EQ(verdicts.size(), walked.cases.size());
  for (size_t i = 0; i < verdicts.size(); ++i)
    EXPECT_TRUE(verdicts[i].valid) << walked.names[i] << " -> " << walked.cases[i].second << ": " << verdicts[i].error;
  std::cout << walked.cases.size() << " calls validated from " << walked.replies << " replies\n";
}

// Planted control: a walked call with one value turned into text the schema does not allow fails the same check.
TEST(StrictToolCalls, PlantedBrokenArgumentsFailValidation) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  const auto g = cache.for_tool_calls({.tools = kTools,
                                       .start = grammar::ToolCallSpec::Start::arguments,
                                       .function = "get_weather",
                                       .parallel = false});
  const WalkResult w = random_walk(g, 3, 700, 0);
  ASSERT_TRUE(w.finished);
  const std::string forced = "<tool_call>\n<function=get_weather>\n";
  const auto good = server::parse_chat_output(as_text(w.document), false, true, kTools, forced);
  ASSERT_EQ(good.tool_calls.size(), 1u);
  OrderedJson broken = good.tool_calls[0].arguments;
  broken["days"] = "many";
  const auto verdicts = ajv_validate({{parameters_of("get_weather"), good.tool_calls[0].arguments.dump()},
                                      {parameters_of("get_weather"), broken.dump()}});
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_TRUE(verdicts[0].valid) << verdicts[0].error;
  EXPECT_FALSE(verdicts[1].valid);
}

// The tags are terminals: the added token, never the tag's bytes (which the parser would read as a call the grammar
// did not hold).
TEST(StrictToolCalls, TagsAreSingleTokens) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  const auto open = tok->token_to_id("<tool_call>"), close = tok->token_to_id("</tool_call>");
  ASSERT_TRUE(open && close);
  grammar::Matcher m(cache.for_tool_calls(reply_spec(kTools)));
  ASSERT_TRUE(m.accept_bytes("Let me check.\n\n"));
  std::vector<uint32_t> mask(static_cast<size_t>(m.compiled().vocabulary().words()));
  m.fill_mask(mask);
  EXPECT_TRUE(grammar::test_bit(mask, *open));
  EXPECT_FALSE(grammar::test_bit(mask, *close));
  grammar::Matcher spelled(cache.for_tool_calls(reply_spec(kTools)));
  EXPECT_FALSE(spelled.accept_bytes("Let me check.\n\n<tool_call>"));  // the tag in plain bytes is refused
  EXPECT_TRUE(spelled.accept_bytes("Let me check.\n\n<tool_cal"));     // text that merely starts like it is not
  ASSERT_TRUE(m.accept_token(*open));
  EXPECT_TRUE(m.accept_bytes("\n<function=ping>\n</function>\n"));
  m.fill_mask(mask);
  EXPECT_TRUE(grammar::test_bit(mask, *close));
  std::vector<uint32_t> only(mask.size(), 0);
  grammar::set_bit(only, *close);
  EXPECT_EQ(mask, only);  // nothing but the closing tag
}

TEST(StrictToolCalls, RefusalsNameTheToolAndPath) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  const auto tools = OrderedJson::parse(R"([{"type": "function", "function": {"name": "f", "strict": true,
      "parameters": {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 3}}}}}])");
  try {
    cache.for_tool_calls(reply_spec(tools));
    ADD_FAILURE() << "not refused";
  } catch (const grammar::SchemaError& e) {
    EXPECT_EQ(e.path(), "tools[0].function.parameters/properties/n") << e.what();
  }
  // Not strict: the keyword is ignored and listed.
  auto loose = tools;
  loose[0]["function"]["strict"] = false;
  std::vector<std::string> ignored;
  cache.for_tool_calls({.tools = loose, .start = grammar::ToolCallSpec::Start::call, .function = "", .parallel = true},
                       &ignored);
  EXPECT_EQ(ignored, std::vector<std::string>{"tools[0].function.parameters/properties/n: multipleOf"});
}

}  // namespace
}  // namespace duet::testing
