// A chat request body reaches the template as the client wrote it: tools, tool-call arguments (as a JSON string
// or an object) and the JSON inside them keep their key order, numbers their Python form. The reference is
// Python itself: the same bodies read with json.loads and rendered by Jinja2 as transformers runs the template
// (render_request_bodies_jinja2.py); the prompts must be equal byte for byte.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "../run_command.h"
#include "base/error.h"
#include "server/chat_request.h"
#include "tokenizer/chat_template.h"

namespace duet::server {
namespace {

const std::string kTests = DUET_TESTS_DIR;
const std::string kTemplate = kTests + "/../tools/qwen35_chat_template.jinja";
const std::string kBodies = kTests + "/server/chat_bodies_key_order.jsonl";

std::vector<std::string> body_lines() {
  std::ifstream in(kBodies);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// What POST /v1/chat/completions renders for this body.
std::string render_as_server(const std::string& body) {
  ServerOptions options;
  options.served_model_name = "demo";
  ChatRequest request = parse_chat_request(parse_json_body(body), options);
  tokenizer::ChatOptions chat_options;
  chat_options.tools = request.tools;
  chat_options.enable_thinking = request.enable_thinking;
  return tokenizer::render_chat(request.messages, chat_options);
}

TEST(ChatBodyTemplate, EqualsPythonJsonAndJinja2) {
  const auto python = testing::run_command(
      "/usr/bin/python3 '" + kTests + "/server/render_request_bodies_jinja2.py' '" + kTemplate + "' '" + kBodies + "'");
  ASSERT_EQ(python.status, 0) << "python3 with jinja2 is needed (scripts/setup.sh installs python3-jinja2)";
  const auto rendered = nlohmann::json::parse(python.output);
  const auto bodies = body_lines();
  ASSERT_EQ(rendered.size(), bodies.size());
  ASSERT_GE(bodies.size(), 6u);
  for (size_t k = 0; k < bodies.size(); ++k) {
    ASSERT_TRUE(rendered[k].contains("text")) << "line " << k + 1 << ": " << rendered[k].dump();
    EXPECT_EQ(render_as_server(bodies[k]), rendered[k]["text"].get<std::string>()) << "line " << k + 1;
  }
}

// The reference itself must see the order: sorted keys would give another prompt (the test could not fail otherwise).
TEST(ChatBodyTemplate, SortedKeysWouldDiffer) {
  const std::string body = body_lines().at(0);
  const std::string sorted = nlohmann::json::parse(body).dump();  // nlohmann::json sorts object keys
  EXPECT_NE(render_as_server(body), render_as_server(sorted));
}

}  // namespace
}  // namespace duet::server
