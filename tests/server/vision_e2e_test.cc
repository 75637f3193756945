// Images end to end over HTTP (issue 21): `duet serve` on tiny-vl (the CPU backend, its vision tower, and the tokenizer
// tools/make_vision_tokenizer.py made for it) answers a chat request holding one image with exactly the greedy tokens
// transformers FP32 generated for the same prompt and image (vision.fp32.safetensors: decode.ids, decode.fed, from
// tools/make_vision_fixtures.py), and their log-probabilities with transformers' (from its FP32 rows, within 1e-3).
// The tokenizer puts the chat framing of one user message with one image at the text ids of that golden prompt, so the
// request reaches the model as the very ids transformers read.
// Also: the same request twice, beside concurrent text requests, as two choices (the second forked from the first's
// state), streamed, and on a server with n-gram drafts, gives the same tokens;
// the planted control (another image of the same grid) does not; broken and hostile images, remote URLs, images in a
// system message, a prompt that writes the markup itself and an image past the context are refused with 400 naming
// the part while the server stays up; --no-vision refuses image parts by name.
// POST /v1/responses (input_image) and /v1/messages (image blocks, count_tokens) give chat's reply for the same image
// and text, whole and streamed; another image gives another reply there too; hostile images are refused naming each
// route's part path. tests/server/clients/images.mjs does the same through the official openai and Anthropic clients
// (and the AI SDK and LangChain).
// The demo model (issue 21 item 5: a small random tower, tools/add_demo_vision_tower.py), served as scripts/run.sh
// serves it, answers a chat request with a PNG and counts its image tokens; another image of the same grid moves its
// log-probabilities. A copy of the demo without vision_config refuses image parts by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "../tests_dir.h"
#include "../vision_golden_logprobs.h"
#include "checkpoint/checkpoint.h"
#include "image_server.h"
#include "server_process.h"

namespace duet::testing::vision_e2e {

using Json = nlohmann::json;

std::string model_dir() { return tests_dir() + "/fixtures/models/tiny-vl"; }
std::string image_path(const std::string& name) { return tests_dir() + "/fixtures/vision/images/" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::string data_url(const std::string& bytes, const std::string& type = "image/png") {
  return "data:" + type + ";base64," + base64(bytes);
}

Json image_part(const std::string& url) {
  return {{"type", "image_url"}, {"image_url", {{"url", url}, {"detail", "auto"}}}};
}

// One user message holding only `parts`, thinking off: with this tokenizer, the golden `decode` prompt for one image.
Json image_chat(const std::vector<Json>& parts, int max_tokens = 6) {
  Json body = {{"model", "tiny-vl"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"return_token_ids", true}};
  body["messages"] = Json::array({{{"role", "user"}, {"content", Json(parts)}}});
  body["logprobs"] = true;
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  return body;
}

Json text_chat(const std::string& text) {
  return {{"model", "tiny-vl"},
          {"messages", Json::array({{{"role", "user"}, {"content", text}}})},
          {"max_tokens", 8},
          {"temperature", 0},
          {"return_token_ids", true}};
}

Json post(const ServerProcess& server, const Json& body, int status = 200) {
  auto res = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(res);
  if (!res) return Json();
  EXPECT_EQ(res->status, status) << res->body;
  return Json::parse(res->body, nullptr, false);
}

// What must not change between runs: the choices and the usage (not the id or the time, nor how many prompt tokens
// the prompt cache resumed, which depends on what ran before).
Json answer_of(const Json& reply) {
  Json usage = reply.value("usage", Json());
  if (usage.is_object()) usage.erase("prompt_tokens_details");
  return {reply.value("choices", Json()), usage};
}

std::vector<int32_t> token_ids(const Json& reply) {
  if (!reply.contains("choices") || reply["choices"].empty()) return {};
  return reply["choices"][0].value("token_ids", std::vector<int32_t>{});
}

std::vector<int32_t> golden(const std::string& name) {
  const auto file = checkpoint::Checkpoint::open_file(tests_dir() + "/fixtures/goldens/vision.fp32.safetensors");
  const checkpoint::TensorView* found = file.find(name);
  if (found == nullptr) return {};
  const auto& t = file.require(name, {checkpoint::DType::i32}, found->shape);
  return {t.data<int32_t>(), t.data<int32_t>() + t.element_count()};
}

// A fixture image's image_grid_thw as transformers' processor made it with the stock settings (tiny-vl's).
std::vector<int64_t> stock_grid(const std::string& name) {
  const auto file = checkpoint::Checkpoint::open_file(tests_dir() + "/fixtures/goldens/vision.fp32.safetensors");
  const auto& t = file.require("img." + name + ".stock.grid", {checkpoint::DType::i64}, {3});
  return {t.data<int64_t>(), t.data<int64_t>() + 3};
}

// The refusal's error object, after checking its status and that the server still answers.
Json refusal(const ServerProcess& server, const Json& body) {
  const Json reply = post(server, body, 400);
  EXPECT_TRUE(server.alive());
  EXPECT_EQ(server.client().Get("/health")->status, 200);
  return reply.value("error", Json());
}

class VisionServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_dir() + "/tokenizer.json")) return;
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--backend", "cpu", "--parallel", "4", "--context", "512"}, model_dir());
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << model_dir() << " has no tokenizer.json: tools/make_vision_tokenizer.py";
  }

  static inline std::unique_ptr<ServerProcess> server_;
  const std::string small_png_ = data_url(read_bytes(image_path("small_png.png")));
};

TEST_F(VisionServe, AnswersWithTransformersGreedyTokens) {
  const std::vector<int32_t> want = golden("decode.fed"), prompt = golden("decode.ids");
  ASSERT_EQ(want.size(), 6u);
  const Json reply = post(*server_, image_chat({image_part(small_png_)}));
  EXPECT_EQ(token_ids(reply), want) << reply.dump();
  // Their log-probabilities against transformers' (the tokens alone would not see decode rows without the rope delta).
  const std::vector<double> logprobs = vision_golden_logprobs();
  const Json content = reply["choices"][0]["logprobs"].value("content", Json::array());
  ASSERT_EQ(content.size(), logprobs.size()) << reply.dump();
  double worst = 0;
  for (size_t k = 0; k < logprobs.size(); ++k)
    worst = std::max(worst, std::abs(content[k]["logprob"].get<double>() - logprobs[k]));
  std::printf("image chat over HTTP: token ids %s transformers', log-probabilities within %.2e\n",
              token_ids(reply) == want ? "equal" : "differ from", worst);
  EXPECT_LE(worst, 1e-3);
  // usage counts the image's tokens: the golden prompt is 3 text ids, 72 image markup ids and 4 text ids.
  EXPECT_EQ(reply["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  // The same request again gives the same bytes.
  EXPECT_EQ(answer_of(post(*server_, image_chat({image_part(small_png_)}))), answer_of(reply));
}

// The planted control: another image with the same grid (so the same prompt ids) must not give transformers' tokens.
TEST_F(VisionServe, AnotherImageGivesOtherTokens) {
  for (const char* other : {"gray_png.png", "alpha_png.png"}) {
    const Json reply = post(*server_, image_chat({image_part(data_url(read_bytes(image_path(other))))}));
    EXPECT_EQ(reply["usage"]["prompt_tokens"], golden("decode.ids").size()) << other << ": the same grid";
    EXPECT_NE(token_ids(reply), golden("decode.fed")) << other;
  }
}

// Row invariance: the image request beside text requests (and text beside it) gives the bytes it gives alone.
TEST_F(VisionServe, ConcurrentTextRequestsChangeNothing) {
  const Json image_alone = answer_of(post(*server_, image_chat({image_part(small_png_)}, 12)));
  const std::vector<std::string> texts = {"Hello there", "What is in the picture?", "abc def ghi jkl"};
  std::vector<Json> texts_alone;
  for (const std::string& text : texts) texts_alone.push_back(answer_of(post(*server_, text_chat(text))));
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<Json>> text_replies;
    for (const std::string& text : texts)
      text_replies.push_back(std::async(std::launch::async, [&, text] { return post(*server_, text_chat(text)); }));
    auto image_reply =
        std::async(std::launch::async, [&] { return post(*server_, image_chat({image_part(small_png_)}, 12)); });
    EXPECT_EQ(answer_of(image_reply.get()), image_alone) << "round " << round;
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(answer_of(text_replies[i].get()), texts_alone[i]) << texts[i] << ", round " << round;
  }
}

// Two choices of one prompt: the second starts from a fork of the first's prefilled state and must keep the rope delta.
TEST_F(VisionServe, ChoicesForkedFromAnImagePromptAgree) {
  Json body = image_chat({image_part(small_png_)});
  body["n"] = 2;
  const Json reply = post(*server_, body);
  ASSERT_EQ(reply["choices"].size(), 2u) << reply.dump();
  for (const Json& choice : reply["choices"])
    EXPECT_EQ(choice.value("token_ids", std::vector<int32_t>{}), golden("decode.fed"));
}

TEST_F(VisionServe, StreamedAnswerIsTheSame) {
  Json body = image_chat({image_part(small_png_)});
  body["stream"] = true;
  auto res = server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  std::vector<int32_t> ids;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("data: {")) continue;
    const Json chunk = Json::parse(line.substr(6));
    for (const Json& choice : chunk["choices"])
      for (int32_t id : choice.value("token_ids", std::vector<int32_t>{})) ids.push_back(id);
  }
  EXPECT_EQ(ids, golden("decode.fed"));
}

TEST_F(VisionServe, BadImagesAreRefusedNamingThePart) {
  const std::string png = read_bytes(image_path("small_png.png"));
  const Json text = {{"type", "text"}, {"text", "Look: "}};
  // Truncated bytes, bytes that are no image, a declared 30000 x 30000 PNG (refused from its header), bad base64.
  std::string bomb = png.substr(0, 16);
  for (int shift : {24, 16, 8, 0}) bomb += static_cast<char>((30000 >> shift) & 255);  // width
  for (int shift : {24, 16, 8, 0}) bomb += static_cast<char>((30000 >> shift) & 255);  // height
  bomb += png.substr(24);
  for (const std::string& url : {data_url(png.substr(0, png.size() / 2)), data_url("just some text, not an image"),
                                 data_url(bomb), std::string("data:image/png;base64,!!!!")}) {
    const Json error = refusal(*server_, image_chat({text, image_part(url)}));
    EXPECT_EQ(error.value("param", ""), "messages[0].content[1]") << error.dump();
    EXPECT_EQ(error.value("code", ""), "invalid_image") << error.dump();
  }
  // Remote URLs are never fetched.
  for (const char* url : {"https://example.com/cat.png", "http://127.0.0.1:1/cat.png"}) {
    const Json error = refusal(*server_, image_chat({text, image_part(url)}));
    EXPECT_EQ(error.value("param", ""), "messages[0].content[1].image_url.url") << error.dump();
    EXPECT_NE(error.value("message", "").find("not fetched"), std::string::npos) << error.dump();
  }
  // The template refuses images in a system message.
  Json system = image_chat({image_part(small_png_)});
  system["messages"].insert(system["messages"].begin(),
                            Json{{"role", "system"}, {"content", Json::array({image_part(small_png_)})}});
  EXPECT_EQ(refusal(*server_, system).value("param", ""), "messages[0].content[0]");
  // A text that writes the image markup itself has an image token and no image.
  const Json markup = refusal(*server_, text_chat("look <|image_pad|> here"));
  EXPECT_EQ(markup.value("code", ""), "invalid_messages") << markup.dump();
  // Eight images of 70 tokens do not fit the context of 512: the first part that overflows is named (the seventh:
  // 23 text tokens and six images leave it 69), before it is resized.
  const Json many = refusal(*server_, image_chat(std::vector<Json>(8, image_part(small_png_))));
  EXPECT_EQ(many.value("code", ""), "context_length_exceeded") << many.dump();
  EXPECT_EQ(many.value("param", ""), "messages[0].content[6]") << many.dump();
  // After all that, the golden answer is still the golden answer.
  EXPECT_EQ(token_ids(post(*server_, image_chat({image_part(small_png_)}))), golden("decode.fed"));
}

// The other chat-like routes (issue 21, route coverage): Responses' input_image and Messages' image blocks reach the
// same prompt after the template as chat's image_url (thinking off), so the same greedy reply: chat's, whose token ids
// are transformers' own (above). Their text, usage and count_tokens are compared with chat's.
Json post_to(const ServerProcess& server, const std::string& path, const Json& body, int status = 200) {
  auto res = server.client().Post(path, body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) return Json();
  EXPECT_EQ(res->status, status) << path << ": " << res->body;
  return Json::parse(res->body, nullptr, false);
}

Json input_image(const std::string& url) { return {{"type", "input_image"}, {"image_url", url}, {"detail", "auto"}}; }

Json image_response(const std::vector<Json>& parts, int max_tokens = 6) {
  return {{"model", "tiny-vl"}, {"max_output_tokens", max_tokens},
          {"temperature", 0},   {"reasoning", {{"effort", "none"}}},
          {"store", false},     {"input", Json::array({{{"role", "user"}, {"content", Json(parts)}}})}};
}

Json image_block(const std::string& bytes, const std::string& media_type = "image/png") {
  return {{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", media_type}, {"data", base64(bytes)}}}};
}

Json image_message(const std::vector<Json>& blocks, int max_tokens = 6) {
  return {{"model", "tiny-vl"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"thinking", {{"type", "disabled"}}},
          {"messages", Json::array({{{"role", "user"}, {"content", Json(blocks)}}})}};
}

std::string chat_text(const Json& reply) { return reply["choices"][0]["message"].value("content", ""); }
std::string response_text(const Json& reply) { return reply.value("output_text", ""); }
std::string message_text(const Json& reply) {
  std::string text;
  for (const Json& block : reply.value("content", Json::array()))
    if (block.value("type", "") == "text") text += block.value("text", "");
  return text;
}

TEST_F(VisionServe, ResponsesAndMessagesAnswerAsChatDoes) {
  const std::vector<int32_t> want = golden("decode.fed"), prompt = golden("decode.ids");
  const std::string png = read_bytes(image_path("small_png.png"));
  const Json chat = post(*server_, image_chat({image_part(small_png_)}));
  ASSERT_EQ(token_ids(chat), want) << chat.dump();
  const std::string text = chat_text(chat);
  ASSERT_FALSE(text.empty());

  const Json response = post_to(*server_, "/v1/responses", image_response({input_image(small_png_)}));
  EXPECT_EQ(response_text(response), text) << response.dump();
  EXPECT_EQ(response["usage"]["input_tokens"], prompt.size()) << response.dump();
  EXPECT_EQ(response["usage"]["output_tokens"], want.size()) << response.dump();
  EXPECT_EQ(response["status"], "incomplete");  // max_output_tokens cut it, as length on chat

  const Json message = post_to(*server_, "/v1/messages", image_message({image_block(png)}));
  EXPECT_EQ(message_text(message), text) << message.dump();
  EXPECT_EQ(message["usage"]["input_tokens"], prompt.size()) << message.dump();
  EXPECT_EQ(message["usage"]["output_tokens"], want.size()) << message.dump();
  EXPECT_EQ(message["stop_reason"], "max_tokens");
  // count_tokens counts the image's tokens as the message did.
  Json count = image_message({image_block(png)});
  count.erase("max_tokens");
  count.erase("temperature");
  EXPECT_EQ(post_to(*server_, "/v1/messages/count_tokens", count)["input_tokens"], prompt.size());

  // A media type that disagrees with the bytes: decoded by the bytes' signature, as chat's data URLs are.
  EXPECT_EQ(message_text(post_to(*server_, "/v1/messages", image_message({image_block(png, "image/jpeg")}))), text);
  EXPECT_EQ(token_ids(post(*server_, image_chat({image_part(data_url(png, "image/jpeg"))}))), want);
  std::printf(
      "responses and messages with an image: the text of chat's transformers-equal tokens (%zu), %zu prompt "
      "tokens\n",
      want.size(), prompt.size());
}

// Text around the image keeps its place on every route: "Look: " IMAGE " now?" and "Look: " " now?" IMAGE (the same
// tokens in another order, the control) each give one reply on all three routes, and the two replies differ.
TEST_F(VisionServe, TextAroundTheImageKeepsItsPlaceOnEveryRoute) {
  const std::string png = read_bytes(image_path("small_png.png"));
  std::vector<std::string> replies;
  for (const bool image_last : {false, true}) {
    std::vector<Json> chat_parts = {
        {{"type", "text"}, {"text", "Look: "}}, image_part(small_png_), {{"type", "text"}, {"text", " now?"}}};
    std::vector<Json> response_parts = {{{"type", "input_text"}, {"text", "Look: "}},
                                        input_image(small_png_),
                                        {{"type", "input_text"}, {"text", " now?"}}};
    std::vector<Json> message_blocks = {chat_parts[0], image_block(png), chat_parts[2]};
    if (image_last)
      for (auto* parts : {&chat_parts, &response_parts, &message_blocks}) std::swap((*parts)[1], (*parts)[2]);
    const Json chat = post(*server_, image_chat(chat_parts, 8));
    const Json response = post_to(*server_, "/v1/responses", image_response(response_parts, 8));
    const Json message = post_to(*server_, "/v1/messages", image_message(message_blocks, 8));
    EXPECT_EQ(response_text(response), chat_text(chat)) << "image last: " << image_last;
    EXPECT_EQ(message_text(message), chat_text(chat)) << "image last: " << image_last;
    EXPECT_EQ(response["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    EXPECT_EQ(message["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    replies.push_back(chat_text(chat));
  }
  EXPECT_NE(replies[0], replies[1]) << "the control: the image's place changes the reply";
}

// Streamed answers on both routes: the same text.
TEST_F(VisionServe, StreamedResponsesAndMessagesAreTheSame) {
  const std::string text = chat_text(post(*server_, image_chat({image_part(small_png_)})));
  Json response = image_response({input_image(small_png_)});
  response["stream"] = true;
  Json message = image_message({image_block(read_bytes(image_path("small_png.png")))});
  message["stream"] = true;
  for (const auto& [path, body, delta_type] : {std::tuple{"/v1/responses", response, "response.output_text.delta"},
                                               std::tuple{"/v1/messages", message, "content_block_delta"}}) {
    auto res = server_->client().Post(path, body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    std::string streamed;
    std::istringstream lines(res->body);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("data: {")) continue;
      const Json event = Json::parse(line.substr(6));
      if (event.value("type", "") != delta_type) continue;
      streamed += event.contains("delta") && event["delta"].is_string() ? event["delta"].get<std::string>()
                                                                        : event["delta"].value("text", "");
    }
    EXPECT_EQ(streamed, text) << path;
  }
}

// The planted control on both routes: another image of the same grid (the same prompt ids) gives another reply, and
// the one chat gives for it.
TEST_F(VisionServe, AnotherImageGivesAnotherReplyOnEveryRoute) {
  const std::string golden_text = chat_text(post(*server_, image_chat({image_part(small_png_)})));
  for (const char* other : {"gray_png.png", "alpha_png.png"}) {
    const std::string bytes = read_bytes(image_path(other));
    const Json chat = post(*server_, image_chat({image_part(data_url(bytes))}));
    ASSERT_NE(token_ids(chat), golden("decode.fed")) << other;
    const std::string text = chat_text(chat);
    EXPECT_NE(text, golden_text) << other << ": the control needs another text";
    const Json response = post_to(*server_, "/v1/responses", image_response({input_image(data_url(bytes))}));
    const Json message = post_to(*server_, "/v1/messages", image_message({image_block(bytes)}));
    EXPECT_EQ(response_text(response), text) << other;
    EXPECT_EQ(message_text(message), text) << other;
    EXPECT_EQ(response["usage"]["input_tokens"], golden("decode.ids").size()) << other << ": the same grid";
    EXPECT_EQ(message["usage"]["input_tokens"], golden("decode.ids").size()) << other;
  }
}

TEST_F(VisionServe, BadImagesAreRefusedNamingThePartOnResponsesAndMessages) {
  const std::string png = read_bytes(image_path("small_png.png"));
  std::string bomb = png.substr(0, 16);  // a declared 30000 x 30000 PNG (refused from its header)
  for (int shift : {24, 16, 8, 0}) bomb += static_cast<char>((30000 >> shift) & 255);
  for (int shift : {24, 16, 8, 0}) bomb += static_cast<char>((30000 >> shift) & 255);
  bomb += png.substr(24);
  std::string wrong_magic = png;
  wrong_magic[1] = 'X';
  struct Hostile {
    std::string what, bytes, base64_text;
  };
  const std::vector<Hostile> hostile = {{"truncated", png.substr(0, png.size() / 2), ""},
                                        {"wrong magic", wrong_magic, ""},
                                        {"not an image", "just some text, not an image", ""},
                                        {"30000 x 30000", bomb, ""},
                                        {"not base64", "", "!!!!"}};
  const Json text = {{"type", "text"}, {"text", "Look: "}};
  const Json input_text = {{"type", "input_text"}, {"text", "Look: "}};
  for (const Hostile& h : hostile) {
    const std::string payload = h.base64_text.empty() ? base64(h.bytes) : h.base64_text;
    const Json response = post_to(*server_, "/v1/responses",
                                  image_response({input_text, input_image("data:image/png;base64," + payload)}), 400);
    EXPECT_EQ(response["error"].value("param", ""), "input[0].content[1]") << h.what << ": " << response.dump();
    EXPECT_EQ(response["error"].value("code", ""), "invalid_image") << h.what << ": " << response.dump();
    Json block = image_block("");
    block["source"]["data"] = payload;
    const Json message = post_to(*server_, "/v1/messages", image_message({text, block}), 400);
    EXPECT_EQ(message["type"], "error") << message.dump();
    EXPECT_EQ(message["error"].value("type", ""), "invalid_request_error") << message.dump();
    EXPECT_TRUE(message["error"].value("message", "").starts_with("messages[0].content[1]: "))
        << h.what << ": " << message.dump();
    EXPECT_TRUE(server_->alive()) << h.what;
  }
  // Remote URLs are never fetched, on either route; Responses' file ids name duet's lack of files.
  const Json remote =
      post_to(*server_, "/v1/responses", image_response({input_text, input_image("https://example.com/cat.png")}), 400);
  EXPECT_EQ(remote["error"].value("param", ""), "input[0].content[1].image_url") << remote.dump();
  EXPECT_NE(remote["error"].value("message", "").find("not fetched"), std::string::npos) << remote.dump();
  const Json file =
      post_to(*server_, "/v1/responses",
              image_response({{{"type", "input_image"}, {"file_id", "file-abc"}, {"detail", "auto"}}}), 400);
  EXPECT_EQ(file["error"].value("param", ""), "input[0].content[0].file_id") << file.dump();
  const Json url_source = post_to(
      *server_, "/v1/messages",
      image_message({text, {{"type", "image"}, {"source", {{"type", "url"}, {"url", "http://127.0.0.1:1/cat.png"}}}}}),
      400);
  EXPECT_TRUE(url_source["error"]
                  .value("message", "")
                  .starts_with("messages[0].content[1].source.url: remote image "
                               "URLs are not fetched"))
      << url_source.dump();
  // Too many images for the context, named on both routes (as on chat: the seventh part overflows).
  const Json many_response =
      post_to(*server_, "/v1/responses", image_response(std::vector<Json>(8, input_image(small_png_))), 400);
  EXPECT_EQ(many_response["error"].value("code", ""), "context_length_exceeded") << many_response.dump();
  EXPECT_EQ(many_response["error"].value("param", ""), "input[0].content[6]") << many_response.dump();
  const Json many_message =
      post_to(*server_, "/v1/messages", image_message(std::vector<Json>(8, image_block(png))), 400);
  EXPECT_TRUE(many_message["error"].value("message", "").starts_with("messages[0].content[6]: "))
      << many_message.dump();
  // After all that, the golden answer is still the golden answer.
  EXPECT_EQ(token_ids(post(*server_, image_chat({image_part(small_png_)}))), golden("decode.fed"));
}

// A stored response keeps its image: the next turn through previous_response_id reads it again, and gives what the
// whole conversation sent as input items gives.
TEST_F(VisionServe, AStoredResponseCarriesItsImageToTheNextTurn) {
  Json first = image_response({input_image(small_png_)});
  first["store"] = true;
  const Json stored = post_to(*server_, "/v1/responses", first);
  ASSERT_EQ(response_text(stored), chat_text(post(*server_, image_chat({image_part(small_png_)}))));
  Json next = image_response({});
  next.erase("store");
  next["input"] = "And then?";
  next["previous_response_id"] = stored["id"];
  const Json continued = post_to(*server_, "/v1/responses", next);
  Json whole = image_response({});
  whole["input"] = Json::array(
      {first["input"][0],
       {{"role", "assistant"}, {"content", Json::array({{{"type", "output_text"}, {"text", response_text(stored)}}})}},
       {{"role", "user"}, {"content", "And then?"}}});
  const Json sent_whole = post_to(*server_, "/v1/responses", whole);
  EXPECT_EQ(response_text(continued), response_text(sent_whole)) << continued.dump();
  EXPECT_EQ(continued["usage"]["input_tokens"], sent_whole["usage"]["input_tokens"]) << continued.dump();
  EXPECT_GT(continued["usage"]["input_tokens"].get<int>(), stored["usage"]["input_tokens"].get<int>());
}

// The same through the official clients (openai: chat and Responses; @anthropic-ai/sdk: Messages and count_tokens), the
// AI SDK and LangChain (chat and Responses each).
TEST_F(VisionServe, OfficialClientsSendTheImageOnEveryRoute) {
  for (const char* package : {"openai", "@anthropic-ai/sdk", "@ai-sdk/openai", "@langchain/openai"})
    if (!std::filesystem::exists(tests_dir() + "/node_modules/" + package))
      FAIL() << package << " is not installed: run scripts/test-deps.sh";
  std::string ids;
  for (int32_t id : golden("decode.fed")) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const auto result = run_command("node " + tests_dir() + "/server/clients/images.mjs " + server_->url() +
                                  " sk-none tiny-vl " + tests_dir() + "/fixtures/vision/images " + ids + " 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("images on every route: ok"), std::string::npos) << result.output;
  EXPECT_TRUE(server_->alive());
}

// POST /tokenize with images (issue 21): the messages' image_url parts go through chat's path, so the tokens are the
// prompt transformers generated from (decode.ids: its processor's 70 image tokens for small_png) and the count is
// chat's prompt_tokens. For every fixture image the count moves by the tokens transformers' processor gives it
// (image_grid_thw, stock settings: t*h*w/4); the control is that two grids give two counts. Bad images are chat's 400s.
Json tokenize_chat(const std::vector<Json>& parts) {
  Json body = image_chat(parts);
  return {{"messages", body["messages"]}, {"chat_template_kwargs", body["chat_template_kwargs"]}};
}

TEST_F(VisionServe, TokenizeCountsImagesAsChatDoes) {
  const std::vector<int32_t> prompt = golden("decode.ids");
  const Json small = post_to(*server_, "/tokenize", tokenize_chat({image_part(small_png_)}));
  EXPECT_EQ(small.value("tokens", std::vector<int32_t>{}), prompt) << small.dump();
  EXPECT_EQ(small["count"], prompt.size());
  const auto tokens_of = [](const std::vector<int64_t>& grid) { return grid[0] * grid[1] * grid[2] / 4; };
  const int64_t small_tokens = tokens_of(stock_grid("small_png"));
  ASSERT_EQ(small_tokens, 70);
  std::set<int64_t> counts;
  for (const char* name :
       {"small_png", "gray_png", "alpha_png", "wide_png", "large_jpg", "portrait_jpg", "lossy_webp", "palette_gif"}) {
    const std::string file = std::string(name) + (std::string(name).ends_with("_jpg")    ? ".jpg"
                                                  : std::string(name).ends_with("_webp") ? ".webp"
                                                  : std::string(name).ends_with("_gif")  ? ".gif"
                                                                                         : ".png");
    const std::string url = data_url(read_bytes(image_path(file)));
    const Json count = post_to(*server_, "/tokenize", tokenize_chat({image_part(url)}));
    const int64_t want = static_cast<int64_t>(prompt.size()) - small_tokens + tokens_of(stock_grid(name));
    EXPECT_EQ(count["count"], want) << name;
    const Json chat = post(*server_, image_chat({image_part(url)}, 1));
    EXPECT_EQ(chat["usage"]["prompt_tokens"], count["count"]) << name << ": chat's prompt_tokens";
    counts.insert(count.value("count", int64_t{0}));
  }
  // The control: the grids 14x20 (five images), 8x44, 20x16 give three counts.
  EXPECT_EQ(counts.size(), 3u) << "other grids must give other counts";
  // Two images: each with its markup and its own run of tokens, in order.
  const std::string wide = data_url(read_bytes(image_path("wide_png.png")));
  const Json two = post_to(*server_, "/tokenize", tokenize_chat({image_part(small_png_), image_part(wide)}));
  EXPECT_EQ(two["count"], prompt.size() + 2 + tokens_of(stock_grid("wide_png")));
  EXPECT_EQ(post(*server_, image_chat({image_part(small_png_), image_part(wide)}, 1))["usage"]["prompt_tokens"],
            two["count"]);
  // chat's refusals, naming the part.
  const Json bad = post_to(*server_, "/tokenize", tokenize_chat({image_part(data_url("not an image"))}), 400);
  EXPECT_EQ(bad["error"].value("code", ""), "invalid_image") << bad.dump();
  EXPECT_EQ(bad["error"].value("param", ""), "messages[0].content[0]") << bad.dump();
}

// The prompt cache keys images by their pixels (engine/image_cache_key.h). The golden prompt's first 64 tokens cut
// small_png's image tokens: the same request again resumes them and gives the same reply; gray_png (the same grid, so
// the same token ids) resumes nothing and gives what a server without a cache gives it, which is not small_png's reply
// (the control). In a conversation, an edited last user turn after an image resumes up to where that turn starts: the
// chat route's cache hint counts the image's whole run of tokens (the hint without it would fall a block earlier).
TEST(VisionServeOptions, PromptCacheResumesOnlyTheSameImage) {
  if (!std::filesystem::exists(model_dir() + "/tokenizer.json")) GTEST_SKIP() << "tools/make_vision_tokenizer.py";
  ServerProcess cached({"--backend", "cpu", "--parallel", "1", "--context", "512"}, model_dir());
  ServerProcess fresh({"--backend", "cpu", "--parallel", "1", "--context", "512", "--prompt-cache-gib", "0"},
                      model_dir());
  const std::string small = data_url(read_bytes(image_path("small_png.png")));
  const std::string gray = data_url(read_bytes(image_path("gray_png.png")));
  const auto resumed = [](const Json& reply) { return reply["usage"]["prompt_tokens_details"]["cached_tokens"]; };
  const Json first = post(cached, image_chat({image_part(small)}));
  EXPECT_EQ(token_ids(first), golden("decode.fed"));
  EXPECT_EQ(resumed(first), 0);
  const Json again = post(cached, image_chat({image_part(small)}));
  EXPECT_EQ(resumed(again), 64) << again.dump();
  EXPECT_EQ(again["choices"], first["choices"]);
  const Json other = post(cached, image_chat({image_part(gray)}));
  EXPECT_EQ(resumed(other), 0) << "another image resumed small_png's state";
  EXPECT_EQ(other["choices"], post(fresh, image_chat({image_part(gray)}))["choices"]);
  EXPECT_NE(other["choices"], first["choices"]) << "the control: the two images must answer differently";

  const auto conversation = [&](const std::string& last) {
    Json body = image_chat({image_part(small), {{"type", "text"}, {"text", std::string(90, 'a')}}});
    body["messages"].push_back({{"role", "assistant"}, {"content", "Fine."}});
    // A long last turn: the prompt's own block ends (and its generation prompt's hint, with or without the image's
    // run) lie past where the edit parts from it.
    body["messages"].push_back({{"role", "user"}, {"content", last + std::string(100, 'b')}});
    return body;
  };
  const Json a = post(cached, conversation("What is it?"));
  // Where the last user turn starts: the last <|im_start|> token of the prompt (tiny-vl's tokenizer writes the
  // answer's header "\n<|im_start|>assistant\n" as one token of its own).
  const Json ids = post_to(
      cached, "/tokenize",
      {{"messages", conversation("What is it?")["messages"]}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  const int32_t im_start = post_to(cached, "/tokenize", {{"prompt", "<|im_start|>"}})["tokens"][0];
  std::vector<size_t> starts;
  for (size_t i = 0; i < ids["tokens"].size(); ++i)
    if (ids["tokens"][i] == im_start) starts.push_back(i);
  ASSERT_EQ(starts.size(), 2u) << ids.dump();
  const size_t last_user = starts.back();
  ASSERT_NE(last_user / 64, (last_user - 69) / 64) << "the hint without the image's run must fall elsewhere";
  const Json b = post(cached, conversation("And the colour?"));
  std::printf("conversation: the last user turn starts at %zu, the edited turn resumed %d (the first %d)\n", last_user,
              resumed(b).get<int>(), resumed(a).get<int>());
  EXPECT_EQ(resumed(b), last_user / 64 * 64) << "an edited last turn resumes where it starts; a: " << resumed(a);
  EXPECT_EQ(b["choices"], post(fresh, conversation("And the colour?"))["choices"]);
}

// A server that drafts (n-gram) answers the same. (Prompts cut into chunks, and drafts that are verified and rewound,
// are checked below the HTTP layer, where the step budget and the drafts can be forced: tests/engine/
// vision_engine_test.cc.)
TEST(VisionServeOptions, DraftingServerGivesTheSameTokens) {
  if (!std::filesystem::exists(model_dir() + "/tokenizer.json")) GTEST_SKIP() << "tools/make_vision_tokenizer.py";
  ServerProcess server({"--backend", "cpu", "--parallel", "2", "--context", "512", "--draft", "ngram"}, model_dir());
  const std::string url = data_url(read_bytes(image_path("small_png.png")));
  EXPECT_EQ(token_ids(post(server, image_chat({image_part(url)}))), golden("decode.fed"));
}

TEST(VisionServeOptions, NoVisionRefusesImagePartsByName) {
  if (!std::filesystem::exists(model_dir() + "/tokenizer.json")) GTEST_SKIP() << "tools/make_vision_tokenizer.py";
  ServerProcess server({"--backend", "cpu", "--parallel", "1", "--context", "256", "--no-vision"}, model_dir());
  const Json error = refusal(server, image_chat({{{"type", "text"}, {"text", "hi"}},
                                                 image_part(data_url(read_bytes(image_path("small_png.png"))))}));
  EXPECT_EQ(error.value("param", ""), "messages[0].content[1]") << error.dump();
  EXPECT_NE(error.value("message", "").find("--no-vision"), std::string::npos) << error.dump();
  EXPECT_EQ(post(server, text_chat("Hello"))["choices"].size(), 1u);  // text is served as before
  // The other routes refuse theirs the same way.
  const Json response = post_to(server, "/v1/responses",
                                image_response({input_image(data_url(read_bytes(image_path("small_png.png"))))}), 400);
  EXPECT_EQ(response["error"].value("param", ""), "input[0].content[0]") << response.dump();
  EXPECT_EQ(response["error"].value("code", ""), "images_not_supported") << response.dump();
  const Json message =
      post_to(server, "/v1/messages", image_message({image_block(read_bytes(image_path("small_png.png")))}), 400);
  EXPECT_TRUE(message["error"].value("message", "").starts_with("messages[0].content[0]: ")) << message.dump();
  EXPECT_NE(message["error"].value("message", "").find("--no-vision"), std::string::npos) << message.dump();
  const Json tokenize =
      post_to(server, "/tokenize", tokenize_chat({image_part(data_url(read_bytes(image_path("small_png.png"))))}), 400);
  EXPECT_EQ(tokenize["error"].value("code", ""), "images_not_supported") << tokenize.dump();
}

// Remote image URLs (duet serve --allow-image-urls, server/image_fetch.h) from a test server on 127.0.0.1, which
// --allow-image-urls-from-private lets the server reach (loopback is refused otherwise, as every private address is):
// the fetched image gives the answer its data URL gives (transformers' tokens) on chat, Responses and Messages, after
// redirects too; what is not fetched is refused with 400 naming the part and why (a body over 20 MiB, declared or sent;
// a port that never answers, at the one-second --image-url-timeout; redirects to another loopback port and to the cloud
// metadata address, loopback's first; a page; bytes that are no image), the server alive.
class VisionImageUrls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_dir() + "/tokenizer.json")) return;
    images_ = std::make_unique<ImageServer>(read_bytes(image_path("small_png.png")), false, (size_t{20} << 20) + 1);
    silent_ = std::make_unique<SilentPort>();
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--backend", "cpu", "--parallel", "2", "--context", "512", "--allow-image-urls",
                                 "--image-url-timeout", "1", "--allow-image-urls-from-private", images_->endpoint(),
                                 "--allow-image-urls-from-private", silent_->endpoint()},
        model_dir());
  }
  static void TearDownTestSuite() {
    server_.reset();
    images_.reset();
    silent_.reset();
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << model_dir() << " has no tokenizer.json: tools/make_vision_tokenizer.py";
  }

  static inline std::unique_ptr<ImageServer> images_;
  static inline std::unique_ptr<SilentPort> silent_;
  static inline std::unique_ptr<ServerProcess> server_;
};

TEST_F(VisionImageUrls, AFetchedImageAnswersAsItsDataUrl) {
  const Json inline_reply = post(*server_, image_chat({image_part(data_url(read_bytes(image_path("small_png.png"))))}));
  ASSERT_EQ(token_ids(inline_reply), golden("decode.fed")) << inline_reply.dump();
  for (const std::string path : {"/image.png", "/hops/3", "/relative"}) {
    const Json reply = post(*server_, image_chat({image_part(images_->url(path))}));
    EXPECT_EQ(answer_of(reply), answer_of(inline_reply)) << path;
  }
  const std::string text = chat_text(inline_reply);
  EXPECT_EQ(
      response_text(post_to(*server_, "/v1/responses", image_response({input_image(images_->url("/image.png"))}))),
      text);
  const Json url_block = {{"type", "image"}, {"source", {{"type", "url"}, {"url", images_->url("/image.png")}}}};
  EXPECT_EQ(message_text(post_to(*server_, "/v1/messages", image_message({url_block}))), text);
  Json count = image_message({url_block});
  count.erase("max_tokens");
  count.erase("temperature");
  EXPECT_EQ(post_to(*server_, "/v1/messages/count_tokens", count)["input_tokens"], golden("decode.ids").size());
}

TEST_F(VisionImageUrls, WhatIsNotFetchedIsRefusedNamingThePartAndWhy) {
  const Json text = {{"type", "text"}, {"text", "Look: "}};
  struct Case {
    std::string url, code, why;
  };
  const std::string metadata = "http://169.254.169.254/latest/meta-data/";
  const std::string other_port = "http://127.0.0.1:1/image.png";
  const std::vector<Case> cases = {
      {images_->url("/large.png"), "invalid_image_url", "the server declares more than 20971520 bytes, the limit"},
      {images_->url("/endless.png"), "invalid_image_url", "the body passed 20971520 bytes, the limit"},
      {"http://" + silent_->endpoint() + "/image.png", "invalid_image_url", "no answer within 1 s"},
      {images_->url("/redirect?to=" + other_port), "invalid_image_url",
       "redirected to " + other_port + ": 127.0.0.1 is a loopback address; image URLs may reach public addresses only"},
      {images_->url("/redirect?to=" + metadata), "invalid_image_url",
       "redirected to " + metadata + ": 169.254.169.254 is a link-local address"},
      {images_->url("/page.html"), "invalid_image_url", "the server sent text/html, not an image"},
      {images_->url("/not-image.png"), "invalid_image", "(the body of " + images_->url("/not-image.png") + ")"},
  };
  for (const Case& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    const Json error = refusal(*server_, image_chat({text, image_part(c.url)}));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(error.value("param", ""), "messages[0].content[1]") << error.dump();
    EXPECT_EQ(error.value("code", ""), c.code) << error.dump();
    const std::string message = error.value("message", "");
    EXPECT_TRUE(message.starts_with("messages[0].content[1]: ")) << message;
    // An assertion: a planted fault of the address check stops here, before a case could reach off this machine.
    ASSERT_NE(message.find(c.why), std::string::npos) << c.why << " in " << message;
    EXPECT_LT(seconds, 5.0) << c.url;
  }
  // On Responses, its own part's path.
  const Json response = post_to(*server_, "/v1/responses",
                                image_response({{{"type", "input_text"}, {"text", "Look: "}},
                                                input_image(images_->url("/redirect?to=" + metadata))}),
                                400);
  EXPECT_EQ(response["error"].value("param", ""), "input[0].content[1]") << response.dump();
  EXPECT_EQ(response["error"].value("code", ""), "invalid_image_url") << response.dump();
  EXPECT_EQ(token_ids(post(*server_, image_chat({image_part(images_->url("/image.png"))}))), golden("decode.fed"));
}

// GET /metrics counts the images the vision tower encoded and its time: a text request adds none, a prompt with two
// images two, and the same prompt again, resumed from the prompt cache past its first image and into its second, one.
TEST_F(VisionServe, MetricsCountTheTowersImages) {
  const auto images = [&] { return server_->metric("duet_vision_tower_images_total").value_or(-1); };
  const auto seconds = [&] { return server_->metric("duet_vision_tower_seconds_total").value_or(-1); };
  const double images_before = images(), seconds_before = seconds();
  ASSERT_GE(images_before, 0);
  post(*server_, text_chat("metrics: no image here"));
  EXPECT_EQ(images(), images_before);
  // A text first that no other test sends, so that nothing of this prompt is in the cache yet.
  const Json body = image_chat({{{"type", "text"}, {"text", "metrics: two pictures"}},
                                image_part(data_url(read_bytes(image_path("gray_png.png")))),
                                image_part(small_png_)});
  const Json first = post(*server_, body);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << first.dump();
  EXPECT_EQ(images(), images_before + 2);
  EXPECT_GT(seconds(), seconds_before);
  const Json again = post(*server_, body);
  const int cached = again["usage"]["prompt_tokens_details"]["cached_tokens"];
  const int prompt = again["usage"]["prompt_tokens"];
  // The prompt ends with the second image's 70 tokens, <|vision_end|> and the 4 tokens of the answer's header.
  EXPECT_GT(cached, prompt - 75) << "the resumed prefix must reach into the second image; " << again.dump();
  EXPECT_LT(cached, prompt - 5) << "and not past it; " << again.dump();
  EXPECT_EQ(images(), images_before + 3) << "only the image the resumed prefix cuts is encoded again";
  EXPECT_EQ(answer_of(again), answer_of(first));
}

// Without --allow-image-urls nothing is fetched: the URL's field is named with the flag, and the image server never
// hears from duet.
TEST_F(VisionServe, RemoteUrlsAreRefusedWithoutTheFlag) {
  ImageServer images(read_bytes(image_path("small_png.png")));
  const Json error = refusal(*server_, image_chat({image_part(images.url("/image.png"))}));
  EXPECT_EQ(error.value("param", ""), "messages[0].content[0].image_url.url") << error.dump();
  EXPECT_NE(error.value("message", "").find("--allow-image-urls"), std::string::npos) << error.dump();
  EXPECT_EQ(images.requests(), 0);
}

}  // namespace duet::testing::vision_e2e

namespace duet::testing::vision_e2e {

// The demo model carries a small random vision tower (tools/add_demo_vision_tower.py, issue 21 item 5), so a newcomer's
// first image request works with nothing downloaded. Its processor (preprocessor_config.json) keeps images between
// 64 x 64 and 256 x 256 pixels: small_png (64 x 48) becomes a 64 x 64 image, 4 x 4 patches, 2 x 2 = 4 image tokens;
// alpha_png (160 x 120) 128 x 160, 8 x 10 patches, 4 x 5 = 20 tokens (docs/vision.md 2.2).
constexpr int kSmallPngTokens = 4, kAlphaPngTokens = 20;

// `duet serve` as scripts/run.sh starts it: no model argument (the binary's default, models/demo) and no flags but
// the port, so the tower loads because the checkpoint has one.
class DemoVision : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (demo_model_available()) server_ = std::make_unique<ServerProcess>(std::vector<std::string>{}, "");
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << demo_model_missing_reason();
  }

  // One user message: `parts` then a question, greedy, 8 tokens, with the first token's log-probabilities.
  static Json chat(std::vector<Json> parts) {
    parts.push_back({{"type", "text"}, {"text", "What is in the image?"}});
    Json body = {{"model", "demo"}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 5}};
    body["messages"] = Json::array({{{"role", "user"}, {"content", Json(parts)}}});
    return body;
  }
  static Json png(const std::string& name) { return image_part(data_url(read_bytes(image_path(name)))); }

  static inline std::unique_ptr<ServerProcess> server_;
};

TEST_F(DemoVision, AnswersAChatWithAnImageAsRunShServesIt) {
  const double images_before = server_->metric("duet_vision_tower_images_total").value_or(-1);
  const Json text = post(*server_, chat({}));
  const Json small = post(*server_, chat({png("small_png.png")}));
  const Json alpha = post(*server_, chat({png("alpha_png.png")}));
  for (const Json* reply : {&small, &alpha}) {
    ASSERT_TRUE(reply->contains("choices")) << reply->dump();
    const std::string finish = (*reply)["choices"][0].value("finish_reason", "");
    EXPECT_TRUE(finish == "stop" || finish == "length") << reply->dump();
  }
  // The markup <|vision_start|><|image_pad|><|vision_end|> with <|image_pad|> repeated once per image token.
  const int text_tokens = text["usage"]["prompt_tokens"];
  EXPECT_EQ(small["usage"]["prompt_tokens"], text_tokens + 2 + kSmallPngTokens) << small.dump();
  EXPECT_EQ(alpha["usage"]["prompt_tokens"], text_tokens + 2 + kAlphaPngTokens) << alpha.dump();
  // In ids: 6009, 6012 x 4, 6010 (config.json's vision_start, image and vision_end token ids) before the question.
  Json tokenize = chat({png("small_png.png")});
  tokenize = {{"messages", tokenize["messages"]}};
  const Json ids = post_to(*server_, "/tokenize", tokenize);
  const auto tokens = ids.value("tokens", std::vector<int32_t>{});
  const std::vector<int32_t> run = {6009, 6012, 6012, 6012, 6012, 6010};
  EXPECT_NE(std::search(tokens.begin(), tokens.end(), run.begin(), run.end()), tokens.end()) << ids.dump();
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), 6012), kSmallPngTokens) << ids.dump();
  EXPECT_EQ(ids["count"], small["usage"]["prompt_tokens"]);
  EXPECT_EQ(server_->metric("duet_vision_tower_images_total").value_or(-1), images_before + 2)
      << "each image through the tower";
}

// The tower's rows reach the language model: gray_png (70 x 50) has small_png's grid, so the prompt's ids are the
// same, and only the rows differ; the first token's log-probabilities must differ too. The same image twice gives the
// same bytes.
TEST_F(DemoVision, TheImageItselfReachesTheModel) {
  const auto first = [](const Json& reply) { return reply["choices"][0]["logprobs"]["content"][0]; };
  const Json small = post(*server_, chat({png("small_png.png")}));
  const Json gray = post(*server_, chat({png("gray_png.png")}));
  ASSERT_TRUE(small.contains("choices") && gray.contains("choices")) << small.dump() << gray.dump();
  EXPECT_EQ(small["usage"]["prompt_tokens"], gray["usage"]["prompt_tokens"]) << "the same grid: the same ids";
  EXPECT_NE(first(small)["top_logprobs"], first(gray)["top_logprobs"]) << first(small).dump();
  EXPECT_EQ(answer_of(post(*server_, chat({png("small_png.png")}))), answer_of(small));
}

// A copy of the demo whose config.json has no vision_config: a model without a vision tower (its checkpoint's
// model.visual.* tensors unread), as the demo was before it had one.
class DemoWithoutATower {
 public:
  DemoWithoutATower() : dir_(std::filesystem::temp_directory_path() / ("duet-no-tower-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::copy(demo_model_dir(), dir_);
    std::filesystem::remove(dir_ / "preprocessor_config.json");
    Json config = Json::parse(read_bytes((dir_ / "config.json").string()));
    config.erase("vision_config");
    std::ofstream((dir_ / "config.json").string()) << config.dump(2);
  }
  ~DemoWithoutATower() { std::filesystem::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

// A model without a vision tower refuses image parts naming the part and why.
TEST(VisionServeOptions, ModelWithoutATowerRefusesImageParts) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  DemoWithoutATower demo;
  ServerProcess server({"--backend", "cpu", "--parallel", "1", "--context", "256"}, demo.dir());
  Json body = image_chat({image_part(data_url(read_bytes(image_path("small_png.png"))))});
  body.erase("model");
  const Json error = refusal(server, body);
  EXPECT_EQ(error.value("code", ""), "images_not_supported") << error.dump();
  EXPECT_EQ(error.value("param", ""), "messages[0].content[0]") << error.dump();
  EXPECT_NE(error.value("message", "").find("no vision tower"), std::string::npos) << error.dump();
}

}  // namespace duet::testing::vision_e2e
