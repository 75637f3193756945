// A chat request body reaches the template as the client wrote it: tools, tool-call arguments (as a JSON string
// or an object) and the JSON inside them keep their key order, numbers their Python form. The reference is
// Python itself: the same bodies read with json.loads and rendered by Jinja2 as transformers runs the template
// (render_request_bodies_jinja2.py); the prompts must be equal byte for byte.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "../run_command.h"
#include "../tests_dir.h"
#include "base/error.h"
#include "server/chat_request.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_template.h"

namespace duet::server {
namespace {

const std::string kTests = ::duet::testing::tests_dir();
const std::string kTemplate = kTests + "/../tools/qwen35_chat_template.jinja";
const std::string kBodies = kTests + "/server/chat_bodies_key_order.jsonl";
// tool_choice required / named function: the prompt ends with the forced start of the call (tool_choice.h).
const std::string kForcedBodies = kTests + "/server/chat_bodies_tool_choice.jsonl";

std::vector<std::string> body_lines(const std::string& file = kBodies) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// What POST /v1/chat/completions renders for this body (thinking on by default, as `duet serve` without
// --no-thinking): the template's text and the forced start of the answer, the text build_chat_prompt tokenizes.
std::string render_as_server(const std::string& body) {
  ServerOptions options;
  options.served_model_name = "demo";
  ChatRequest request = parse_chat_request(parse_json_body(body), options);
  tokenizer::ChatOptions chat_options;
  chat_options.tools = request.tools;
  chat_options.enable_thinking = request.enable_thinking;
  return tokenizer::render_chat(request.messages, chat_options) + forced_answer_start(request.tool_choice);
}

std::vector<std::string> rendered_by_python(const std::string& file) {
  const auto python = testing::run_command(
      "/usr/bin/python3 '" + kTests + "/server/render_request_bodies_jinja2.py' '" + kTemplate + "' '" + file + "'");
  EXPECT_EQ(python.status, 0) << "python3 with jinja2 is needed (scripts/setup.sh installs python3-jinja2)";
  std::vector<std::string> texts;
  for (const auto& item : nlohmann::json::parse(python.output))
    texts.push_back(item.contains("text") ? item["text"].get<std::string>() : "error: " + item.dump());
  return texts;
}

TEST(ChatBodyTemplate, EqualsPythonJsonAndJinja2) {
  const auto rendered = rendered_by_python(kBodies);
  const auto bodies = body_lines();
  ASSERT_EQ(rendered.size(), bodies.size());
  ASSERT_GE(bodies.size(), 6u);
  for (size_t k = 0; k < bodies.size(); ++k) EXPECT_EQ(render_as_server(bodies[k]), rendered[k]) << "line " << k + 1;
}

TEST(ChatBodyTemplate, ForcedToolCallsEqualPythonJinja2AndTheForcedStart) {
  const auto rendered = rendered_by_python(kForcedBodies);
  const auto bodies = body_lines(kForcedBodies);
  ASSERT_EQ(rendered.size(), bodies.size());
  ASSERT_GE(bodies.size(), 5u);
  for (size_t k = 0; k < bodies.size(); ++k) EXPECT_EQ(render_as_server(bodies[k]), rendered[k]) << "line " << k + 1;
  // The forced start comes after an empty think block, where the answer starts; the last line (auto) is the control.
  EXPECT_TRUE(rendered[0].ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n")) << rendered[0];
  EXPECT_TRUE(rendered[1].ends_with("</think>\n\n<tool_call>\n<function=get_time>\n")) << rendered[1];
  EXPECT_TRUE(rendered[4].ends_with("<|im_start|>assistant\n<think>\n")) << rendered[4];
}

// The reference itself must see the order: sorted keys would give another prompt (the test could not fail otherwise).
TEST(ChatBodyTemplate, SortedKeysWouldDiffer) {
  const std::string body = body_lines().at(0);
  const std::string sorted = nlohmann::json::parse(body).dump();  // nlohmann::json sorts object keys
  EXPECT_NE(render_as_server(body), render_as_server(sorted));
}

}  // namespace
}  // namespace duet::server
