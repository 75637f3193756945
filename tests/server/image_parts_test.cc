// Image parts as each chat-like route spells them (server/image_parts.h): chat's image_url, Responses' input_image
// and Messages' image blocks read into the same part (the same data: URL, the same markup in place, in the order the
// template renders them), and refused with the same words, naming each API's own path.
#include "server/image_parts.h"

#include <gtest/gtest.h>

#include "api_error_of.h"
#include "server/chat_request.h"
#include "server/messages_request.h"
#include "server/prompt_images.h"
#include "server/responses_request.h"

namespace duet::server::image_parts_test {
namespace {

const std::string kUrl = "data:image/png;base64,iVBORw0KGgo=";
const std::string kMarkup(kImageMarkup);

ServerOptions options() {
  ServerOptions o;
  o.served_model_name = "demo";
  return o;
}

ChatRequest chat(const std::string& body) { return parse_chat_request(parse_json_body(body), options()); }
ResponsesRequest responses(const std::string& body) {
  return parse_responses_request(parse_json_body(body), options());
}
MessagesRequest messages(const std::string& body, bool count_only = false) {
  return parse_messages_request(parse_json_body(body), options(), count_only);
}

template <typename F>
std::pair<std::string, std::string> refusal(F&& f) {
  const ApiError error = error_of(std::forward<F>(f));
  return {error.param(), error.what()};
}

TEST(ImageParts, EveryRouteReadsTheSamePartInPlace) {
  const auto on_chat = chat(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Look: "},
    {"type": "image_url", "image_url": {"url": ")" +
                            kUrl + R"(", "detail": "low"}}, {"type": "text", "text": "?"}]}]})");
  const auto on_responses =
      responses(R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "Look: "},
    {"type": "input_image", "image_url": ")" +
                kUrl + R"(", "detail": "auto"}, {"type": "input_text", "text": "?"}]}]})");
  const auto on_messages = messages(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [
    {"type": "text", "text": "Look: "}, {"type": "image", "source": {"type": "base64", "media_type": "image/png",
    "data": "iVBORw0KGgo="}}, {"type": "text", "text": "?"}]}]})");
  for (const auto& [m, images, param] :
       {std::tuple{on_chat.messages, on_chat.images, "messages[0].content[1]"},
        std::tuple{on_responses.messages, on_responses.images, "input[0].content[1]"},
        std::tuple{on_messages.messages, on_messages.images, "messages[0].content[1]"}}) {
    ASSERT_EQ(m.size(), 1u) << param;
    EXPECT_EQ(m[0].role, "user");
    EXPECT_EQ(m[0].content, "Look: " + kMarkup + "?") << param;
    ASSERT_EQ(images.size(), 1u) << param;
    EXPECT_EQ(images[0].url, kUrl) << param;
    EXPECT_EQ(images[0].param, param);
  }
}

// The images go in the order the template renders them: on Messages a user turn's tool results come before its text.
TEST(ImageParts, ImagesFollowTheRenderedOrder) {
  const auto on_messages = messages(R"({"max_tokens": 8, "messages": [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "radar", "input": {}}]},
    {"role": "user", "content": [
      {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}},
      {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "map: "},
        {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "BBBB"}}]}]}]})");
  const auto& m = on_messages.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[2].role, "tool");
  EXPECT_EQ(m[2].content, "map: " + kMarkup);
  EXPECT_EQ(m[3].role, "user");
  EXPECT_EQ(m[3].content, kMarkup);
  ASSERT_EQ(on_messages.images.size(), 2u);
  EXPECT_EQ(on_messages.images[0].param, "messages[2].content[1].content[1]");
  EXPECT_EQ(on_messages.images[0].url, "data:image/gif;base64,BBBB");
  EXPECT_EQ(on_messages.images[1].param, "messages[2].content[0]");
  EXPECT_EQ(on_messages.images[1].url, "data:image/jpeg;base64,AAAA");
  // A turn of images alone is a turn; count_tokens reads them too.
  EXPECT_EQ(messages(R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64",
    "media_type": "image/png", "data": "AAAA"}}]}]})",
                     true)
                .images.size(),
            1u);
  // Responses: a function_call_output's parts may hold images too, in item order.
  const auto on_responses = responses(R"({"input": [
    {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
    {"type": "function_call", "call_id": "c", "name": "shot", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image",
      "image_url": "data:image/png;base64,BBBB"}]}]})");
  ASSERT_EQ(on_responses.images.size(), 2u);
  EXPECT_EQ(on_responses.images[0].param, "input[0].content[0]");
  EXPECT_EQ(on_responses.images[1].param, "input[2].output.content[0]");
  EXPECT_EQ(on_responses.messages[2].content, kMarkup);
}

// A remote URL is read as it is on every route, and refused with the same words where the images are read
// (prompt_images.h) by a server that does not fetch them (no --allow-image-urls), before anything is fetched.
TEST(ImageParts, RemoteUrlsAreRefusedWithTheSameWordsEverywhere) {
  const std::string remote = "https://example.com/cat.png";
  const auto on_chat =
      chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ")" + remote +
           R"("}}]}]})")
          .images;
  const auto on_responses =
      responses(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": ")" + remote +
                R"("}]}]})")
          .images;
  const auto on_messages =
      messages(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source":
      {"type": "url", "url": ")" +
               remote + R"("}}]}]})")
          .images;
  const auto refused = [](const std::vector<ImagePart>& parts) {
    EXPECT_EQ(parts.size(), 1u);
    EXPECT_TRUE(!parts.empty() && parts[0].remote());
    VisionSupport no_fetcher;
    no_fetcher.image_token_id = 7;
    std::vector<int32_t> prompt = {1, 7, 2};
    return refusal([&] { expand_prompt_images(no_fetcher, parts, prompt, "messages", 512); });
  };
  const auto chat_refusal = refused(on_chat);
  const auto responses_refusal = refused(on_responses);
  const auto messages_refusal = refused(on_messages);
  EXPECT_EQ(chat_refusal.first, "messages[0].content[0].image_url.url");
  EXPECT_EQ(responses_refusal.first, "input[0].content[0].image_url");
  EXPECT_EQ(messages_refusal.first, "messages[0].content[0].source.url");
  for (const auto& [param, message] : {chat_refusal, responses_refusal, messages_refusal}) {
    EXPECT_TRUE(message.starts_with(param + ": remote image URLs are not fetched; send the image inline")) << message;
    EXPECT_TRUE(message.ends_with("(or start the server with --allow-image-urls)")) << message;
  }
  EXPECT_NE(messages_refusal.second.find("base64 source"), std::string::npos) << messages_refusal.second;
  // Other schemes, and no image at all.
  EXPECT_EQ(refusal([] {
              responses(R"({"input": [{"role": "user", "content": [{"type": "input_image",
                "image_url": "file:///etc/passwd"}]}]})");
            }).second,
            "input[0].content[0].image_url: expected a data: URL (data:image/png;base64,...) or an http(s) URL");
  EXPECT_EQ(refusal([] { responses(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})"); }).first,
            "input[0].content[0].image_url");
  EXPECT_EQ(refusal([] {
              messages(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]})");
            }).first,
            "messages[0].content[0].source");
}

TEST(ImageParts, WhatDuetDoesNotKeepIsRefusedByName) {
  // Files: a Responses file_id, an Anthropic file source.
  const auto file_id = refusal([] {
    responses(R"({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-123"}]}]})");
  });
  EXPECT_EQ(file_id.first, "input[0].content[0].file_id");
  EXPECT_NE(file_id.second.find("no files"), std::string::npos) << file_id.second;
  EXPECT_EQ(refusal([] {
              messages(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source":
                {"type": "file", "file_id": "file_1"}}]}]})");
            }).first,
            "messages[0].content[0].source.type");
  // A media type that would change what the data URL says; a missing one; missing data.
  for (const auto& [source, param] :
       {std::pair{R"({"type": "base64", "media_type": "image/png;base64,AAAA", "data": "AAAA"})", "media_type"},
        std::pair{R"({"type": "base64", "data": "AAAA"})", "media_type"},
        std::pair{R"({"type": "base64", "media_type": "image/png"})", "data"}}) {
    const std::string body = std::string(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type":
      "image", "source": )") +
                             source + "}]}]}";
    EXPECT_EQ(refusal([&] { messages(body); }).first, std::string("messages[0].content[0].source.") + param);
  }
  // A system message cannot hold images, on any route.
  EXPECT_EQ(refusal([] {
              responses(R"({"input": [{"role": "developer", "content": [{"type": "input_image",
                "image_url": "data:image/png;base64,AAAA"}]}]})");
            }).second,
            "input[0].content[0]: a system message cannot contain images (as the chat template says)");
  EXPECT_EQ(refusal([] {
              messages(R"({"max_tokens": 8, "system": [{"type": "image", "source": {"type": "base64",
                "media_type": "image/png", "data": "AAAA"}}], "messages": [{"role": "user", "content": "hi"}]})");
            }).first,
            "system[0].type");
  // Assistant turns on Messages carry no images (as Anthropic's API).
  EXPECT_EQ(refusal([] {
              messages(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                "data": "AAAA"}}]}]})");
            }).first,
            "messages[1].content[0].type");
}

}  // namespace
}  // namespace duet::server::image_parts_test
