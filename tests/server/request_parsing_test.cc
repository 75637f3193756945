#include "server/request_parsing.h"

#include <gtest/gtest.h>

#include "api_error_of.h"
#include "base/exact_json.h"
#include "server/chat_request.h"
#include "server/errors.h"
#include "server/sse.h"

namespace duet::server {
namespace {

ServerOptions options() {
  ServerOptions o;
  o.served_model_name = "demo";
  return o;
}

TEST(ParseJsonBody, RefusesWhatIsNotAJsonObject) {
  EXPECT_EQ(error_of([] { parse_json_body(""); }).status(), 400);
  EXPECT_EQ(error_of([] { parse_json_body("{"); }).code(), "invalid_json");
  EXPECT_EQ(error_of([] { parse_json_body(R"({"max_tokens": 1e999})"); }).code(), "invalid_json");
  EXPECT_EQ(error_of([] { parse_json_body("[1]"); }).code(), "invalid_json");
  EXPECT_EQ(error_of([] { parse_json_body("\"\xff\""); }).code(), "invalid_json");
  EXPECT_EQ(error_of([] { parse_json_body(std::string(100, '[') + std::string(100, ']')); }).code(), "invalid_json");
  EXPECT_NO_THROW(parse_json_body(R"({"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})"));
}

// Was (issue 24, 2): objects of many keys parsed in quadratic time, and only then checked. Now the body is refused
// while it is read, naming the limit and where it was passed.
TEST(ParseJsonBody, ManyKeysAreRefusedByNameWhileReading) {
  std::string keys;
  for (size_t i = 0; i <= kMaxJsonObjectKeys; ++i)
    keys.append(i ? ",\"" : "\"").append(std::to_string(i)).append("\":1");
  const ApiError error = error_of([&] { parse_json_body(R"({"messages": [{"role": "user", "x": {)" + keys + "}}]}"); });
  EXPECT_EQ(error.status(), 413);
  EXPECT_EQ(error.code(), "json_too_large");
  EXPECT_EQ(error.param(), "messages[0].x");
  EXPECT_NE(std::string(error.what()).find("more than 10000 keys in one object"), std::string::npos) << error.what();
  keys.erase(keys.rfind(','));  // the control: at the limit it is read
  EXPECT_NO_THROW(parse_json_body("{\"x\": {" + keys + "}}"));
}

TEST(ParseSampling, ReadsEveryField) {
  auto body = Json::parse(R"({"temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 1,
    "frequency_penalty": -1, "repetition_penalty": 1.1, "seed": 7, "stop": ["a", "b"], "stop_token_ids": [3],
    "ignore_eos": true, "max_tokens": 12, "n": 1, "logit_bias": {}, "return_token_ids": true, "speculative": false})");
  auto sampling = parse_sampling(body);
  EXPECT_FLOAT_EQ(sampling.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(sampling.params.top_p, 0.9f);
  EXPECT_EQ(sampling.params.top_k, 40);
  EXPECT_EQ(sampling.params.seed, 7u);
  EXPECT_EQ(sampling.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(sampling.params.stop_token_ids, (std::vector<int32_t>{3}));
  EXPECT_TRUE(sampling.params.ignore_eos);
  EXPECT_EQ(sampling.max_tokens, 12);
  EXPECT_TRUE(sampling.return_token_ids);
  EXPECT_FALSE(sampling.params.speculative);
  EXPECT_TRUE(parse_sampling(Json::parse("{}")).params.speculative);  // drafted for unless it opts out
}

TEST(ParseSampling, NamesTheBadField) {
  auto param = [](const char* body) { return error_of([&] { parse_sampling(Json::parse(body)); }).param(); };
  EXPECT_EQ(param(R"({"temperature": "hot"})"), "temperature");
  EXPECT_EQ(param(R"({"temperature": 3})"), "temperature");
  EXPECT_EQ(param(R"({"top_p": 0})"), "top_p");
  EXPECT_EQ(param(R"({"top_k": 1.5})"), "top_k");
  EXPECT_EQ(param(R"({"n": 0})"), "n");
  EXPECT_EQ(param(R"({"n": 17})"), "n");  // more than kMaxChoices
  EXPECT_EQ(parse_sampling(Json::parse(R"({"n": 16})")).n, 16);
  EXPECT_EQ(param(R"({"seed": "x"})"), "seed");
  EXPECT_EQ(param(R"({"speculative": "no"})"), "speculative");
  EXPECT_EQ(param(R"({"stop": ["a", 1]})"), "stop[1]");
  EXPECT_EQ(param(R"({"stop": [""]})"), "stop[0]");
  EXPECT_EQ(param(R"({"stop_token_ids": [-1]})"), "stop_token_ids[0]");
  EXPECT_EQ(param(R"({"max_tokens": 0})"), "max_tokens");
  EXPECT_EQ(param(R"({"max_tokens": 99999999999999999999})"), "max_tokens");
  EXPECT_EQ(param(R"({"logit_bias": [1]})"), "logit_bias");
  EXPECT_EQ(param(R"({"logit_bias": {"01": 5}})"), "logit_bias.01");  // "1" and "01" would name one id twice
  EXPECT_EQ(param(R"({"logit_bias": {"x": 5}})"), "logit_bias.x");
  EXPECT_EQ(param(R"({"logit_bias": {"-1": 5}})"), "logit_bias.-1");
  EXPECT_EQ(param(R"({"logit_bias": {"7": 101}})"), "logit_bias.7");
  EXPECT_EQ(param(R"({"logit_bias": {"7": "5"}})"), "logit_bias.7");
  EXPECT_EQ(param(R"({"max_tokens": 3, "max_completion_tokens": 4})"), "max_completion_tokens");
}

TEST(ParseSampling, LogitBiasByTokenId) {
  const auto bias =
      parse_sampling(Json::parse(R"({"logit_bias": {"42": -100, "0": 2.5, "7": 100}})")).params.logit_bias;
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{42, -100.0f}, {0, 2.5f}, {7, 100.0f}}));
  EXPECT_TRUE(parse_sampling(Json::parse(R"({"logit_bias": null})")).params.logit_bias.empty());
}

TEST(ParseSampling, NullsAreAbsentAndSeedIsPickedWhenMissing) {
  auto sampling = parse_sampling(Json::parse(R"({"temperature": null, "stop": null})"));
  EXPECT_FLOAT_EQ(sampling.params.temperature, 1.0f);
  EXPECT_TRUE(sampling.params.stop.empty());
  EXPECT_NE(parse_sampling(Json::object()).params.seed, parse_sampling(Json::object()).params.seed);
}

TEST(ResolveMaxTokens, AsksAreFittedToTheRoomLeftAndOnlyAFullPromptIsRefused) {
  EXPECT_EQ(resolve_max_tokens(std::nullopt, 10, 100, 50, "prompt"), 40);  // the default, fitted
  EXPECT_EQ(resolve_max_tokens(std::nullopt, 10, 20, 50, "prompt"), 20);   // the default (--max-tokens)
  EXPECT_EQ(resolve_max_tokens(5, 10, 20, 50, "prompt"), 5);
  EXPECT_EQ(resolve_max_tokens(30, 10, 20, 50, "prompt"), 30);    // above --max-tokens: asked is asked
  EXPECT_EQ(resolve_max_tokens(8000, 40, 20, 50, "prompt"), 10);  // above the room: fitted
  EXPECT_EQ(resolve_max_tokens(8000, 49, 20, 50, "prompt"), 1);
  EXPECT_EQ(error_of([] { resolve_max_tokens(20, 50, 20, 50, "prompt"); }).code(), "context_length_exceeded");
  EXPECT_EQ(error_of([] { resolve_max_tokens(std::nullopt, 60, 20, 50, "messages"); }).param(), "messages");
}

TEST(ParseStream, IncludeUsageNeedsStream) {
  IgnoredFields ignored;
  EXPECT_TRUE(parse_stream(Json::parse(R"({"stream": true, "stream_options": {"include_usage": true}})"), ignored)
                  .include_usage);
  EXPECT_EQ(
      error_of([&] { parse_stream(Json::parse(R"({"stream_options": {"include_usage": true}})"), ignored); }).param(),
      "stream_options");
  EXPECT_TRUE(ignored.empty());
  parse_stream(Json::parse(R"({"stream": true, "stream_options": {"x": 1}})"), ignored);
  EXPECT_EQ(ignored.paths(), std::vector<std::string>{"stream_options.x"});
}

TEST(ParseChat, ReadsMessagesToolsAndThinking) {
  auto body = Json::parse(R"({"model": "demo", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "chat_template_kwargs": {"enable_thinking": false}, "logprobs": true, "top_logprobs": 3})");
  auto request = parse_chat_request(body, options());
  ASSERT_EQ(request.messages.size(), 4u);
  EXPECT_EQ(request.messages[0].role, "system");
  EXPECT_EQ(request.messages[1].content, "ab");
  ASSERT_EQ(request.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(request.messages[2].tool_calls[0].arguments["x"], 1);
  EXPECT_EQ(request.tools.size(), 1u);
  EXPECT_FALSE(request.enable_thinking);
  EXPECT_EQ(request.sampling.params.top_logprobs, 3);
}

TEST(ParseChat, NamesTheBadField) {
  auto param = [](const char* body) {
    return error_of([&] { parse_chat_request(Json::parse(body), options()); }).param();
  };
  EXPECT_EQ(param(R"({})"), "messages");
  EXPECT_EQ(param(R"({"messages": []})"), "messages");
  EXPECT_EQ(param(R"({"messages": [{"role": "king", "content": "x"}]})"), "messages[0].role");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            "messages[0].content[0].image_url");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x", "audio": {}}]})"), "messages[0].audio");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web"}]})"), "tools[0].type");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"), "top_logprobs");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "functions": []})"), "functions");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x", "function_call": {}}]})"),
            "messages[0].function_call");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "prediction": {}})"), "prediction");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "audio": {}})"), "audio");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "web_search_options": {}})"),
            "web_search_options");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "function_call": "auto"})"), "function_call");
  EXPECT_EQ(
      param(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": 1}})"),
      "chat_template_kwargs.enable_thinking");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})"),
            "response_format.json_schema");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})"),
            "response_format.type");
  EXPECT_EQ(
      error_of([] { parse_chat_request(Json::parse(R"({"model": "gpt-4", "messages": []})"), options()); }).status(),
      404);
}

TEST(ParseChat, UnknownFieldsAreIgnoredAndNamedInOrder) {
  auto request = parse_chat_request(Json::parse(R"({"frobnicate": 1, "messages": [
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a", "x_part": true}], "x_message": "m", "x_null": null}],
    "chat_template_kwargs": {"enable_thinking": false, "x_kwarg": 1}, "x_top": {"deep": [1]}, "x_gone": null})"),
                                    options());
  EXPECT_EQ(request.ignored.paths(),
            (std::vector<std::string>{"frobnicate", "x_top", "messages[1].x_message", "messages[1].content[0].x_part",
                                      "chat_template_kwargs.x_kwarg"}));
  EXPECT_EQ(request.ignored.list(),
            "frobnicate, x_top, messages[1].x_message, messages[1].content[0].x_part, chat_template_kwargs.x_kwarg");
  EXPECT_EQ(request.messages[1].content, "a");
  EXPECT_FALSE(request.enable_thinking);
  // Control: documented fields, with or without effect, are not named.
  EXPECT_TRUE(parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x", "name": "n"}],
      "metadata": {}, "store": false, "verbosity": "low", "user": "u", "seed": 1})"),
                                 options())
                  .ignored.empty());
}

TEST(ParseChat, AnUnknownFieldBesideAWrongTypedKnownOneIsStillRefused) {
  auto param = [](const char* body) {
    return error_of([&] { parse_chat_request(Json::parse(body), options()); }).param();
  };
  EXPECT_EQ(param(R"({"frobnicate": 1, "messages": [{"role": "user", "content": "x"}], "temperature": "hot"})"),
            "temperature");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 5, "x": 1}]}]})"),
            "messages[0].content[0].text");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}], "stream": true,
      "stream_options": {"include_usage": "yes", "x": 1}})"),
            "stream_options.include_usage");
}

TEST(IgnoredFields, NamesAreEscapedAndCapped) {
  IgnoredFields ignored;
  ignored.add("a, b");
  ignored.add("caf\xc3\xa9\r\n%");
  EXPECT_EQ(ignored.list(), "a%2C%20b, caf%C3%A9%0D%0A%25");
  for (size_t i = 0; i < 40; ++i) {
    std::string key = "k";
    ignored.add(key += std::to_string(i));
  }
  EXPECT_EQ(ignored.count(), 42u);
  EXPECT_EQ(ignored.paths().size(), IgnoredFields::kMaxNamed);
  EXPECT_TRUE(ignored.list().ends_with(", k29, ... (10 more)")) << ignored.list();
  IgnoredFields long_name;
  long_name.add(std::string(500, 'x'));
  EXPECT_EQ(long_name.list(), std::string(IgnoredFields::kMaxNameBytes, 'x') + "...");
  EXPECT_TRUE(report_ignored_fields(IgnoredFields(), "/r").empty());
  EXPECT_EQ(report_ignored_fields(long_name, "/r").at(0).first, "X-Duet-Ignored-Fields");
}

TEST(ParseChat, IgnoresHarmlessFields) {
  auto body = Json::parse(R"({"messages": [{"role": "user", "content": "x", "name": "bob"}], "user": "u1",
    "parallel_tool_calls": true, "store": false, "metadata": {"a": "b"}})");
  EXPECT_NO_THROW(parse_chat_request(body, options()));
}

TEST(ErrorShape, IsOpenAis) {
  auto json = error_json(ApiError(400, "temperature: bad", "temperature", "invalid_value"));
  EXPECT_EQ(json["error"]["message"], "temperature: bad");
  EXPECT_EQ(json["error"]["type"], "invalid_request_error");
  EXPECT_EQ(json["error"]["param"], "temperature");
  EXPECT_EQ(json["error"]["code"], "invalid_value");
  EXPECT_TRUE(error_json(401, "no key")["error"]["param"].is_null());
  EXPECT_EQ(error_json(401, "no key")["error"]["type"], "authentication_error");
}

TEST(Sse, FramesEvents) {
  EXPECT_EQ(sse_event(Json{{"a", "x\ny"}}), "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // Invalid UTF-8 from a token cut mid-character is replaced, never thrown.
  EXPECT_EQ(sse_event(Json{{"a", std::string("\xe4\xb8")}}), "data: {\"a\":\"\xEF\xBF\xBD\"}\n\n");
}

}  // namespace
}  // namespace duet::server
