// render_chat must equal, byte for byte, tools/qwen35_chat_template.jinja rendered by real Jinja engines:
// Jinja2 set up as transformers sets it up (the reference the model was trained with) and @huggingface/jinja
// (independent; it differs from Python on a few scalars, so cases marked python_only skip it). Cases with image parts
// check that the template renders an image where it stands as the markup the server writes into the text before
// render_chat (server/image_parts.h), and refuses one in a system message as the server does.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../run_command.h"
#include "../tests_dir.h"
#include "base/error.h"

namespace duet::tokenizer {
namespace {

const std::string kTemplateTests = ::duet::testing::tests_dir();
const std::string kTemplate = kTemplateTests + "/../tools/qwen35_chat_template.jinja";
const std::string kCases = kTemplateTests + "/tokenizer/chat_cases.json";

using ojson = nlohmann::ordered_json;

ojson read_cases() {
  std::ifstream in(kCases);
  return ojson::parse(in);
}

// Runs `command`; returns its stdout, or nullopt when it fails (engine not installed).
std::optional<std::string> run(const std::string& command) {
  auto result = testing::run_command(command);
  if (result.status != 0) return std::nullopt;
  return result.output;
}

// What duet's server writes in place of an image part before rendering (server/image_parts.h, kImageMarkup): the
// published template's markup, which tools/qwen35_chat_template.jinja renders for such a part too.
constexpr std::string_view kImageMarkup = "<|vision_start|><|image_pad|><|vision_end|>";

// A message's content as the server hands it to render_chat: a string, or parts joined with images as their markup
// (an image in a system message refused, as the server refuses it).
std::string content_of(const ojson& m) {
  if (!m.contains("content")) return "";
  const ojson& content = m["content"];
  if (content.is_string()) return content;
  std::string out;
  if (content.is_array())
    for (const ojson& part : content) {
      if (part.contains("text")) {
        out += part["text"].get<std::string>();
      } else {
        if (m.at("role") == "system") throw Error("an image in a system message");
        out += kImageMarkup;
      }
    }
  return out;
}

std::vector<ChatMessage> to_messages(const ojson& messages) {
  std::vector<ChatMessage> out;
  for (const ojson& m : messages) {
    ChatMessage c;
    c.role = m.at("role");
    c.content = content_of(m);
    if (m.contains("reasoning_content")) c.reasoning_content = m["reasoning_content"].get<std::string>();
    if (m.contains("tool_calls")) {
      for (const ojson& call : m["tool_calls"]) {
        const ojson& f = call.at("function");
        c.tool_calls.push_back({f.at("name").get<std::string>(), f.value("arguments", ojson())});
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Renders every case natively: {name -> text}, or "ERROR" for a refusal.
std::map<std::string, std::string> render_native(const ojson& cases) {
  std::map<std::string, std::string> out;
  for (const ojson& c : cases) {
    ChatOptions options;
    if (c.contains("tools")) options.tools = c["tools"];
    options.add_generation_prompt = c.value("add_generation_prompt", true);
    options.enable_thinking = c.value("enable_thinking", true);
    try {  // to_messages refuses what the server refuses before rendering
      out[c["name"]] = render_chat(to_messages(c["messages"]), options);
    } catch (const Error& e) {
      out[c["name"]] = "ERROR";
    }
  }
  return out;
}

void compare(const std::string& engine, const std::string& command, bool skip_python_only) {
  const auto output = run(command);
  if (!output) FAIL() << engine << " is not available (" << command << ")";
  const auto rendered = nlohmann::json::parse(*output);
  const ojson cases = read_cases();
  ASSERT_GE(cases.size(), 43u);
  const auto native = render_native(cases);
  size_t compared = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const ojson& c = cases[k];
    const std::string name = c["name"];
    ASSERT_EQ(rendered[k]["name"], name);
    if (skip_python_only && c.contains("python_only")) continue;
    ++compared;
    if (c.value("error", false)) {
      EXPECT_TRUE(rendered[k].contains("error")) << engine << " rendered " << name;
      if (c.contains("duet_extension")) {  // the template refuses it; duet renders it as the case spells out
        EXPECT_EQ(native.at(name), c["duet_extension"].get<std::string>()) << name;
      } else {
        EXPECT_EQ(native.at(name), "ERROR") << name << ": render_chat did not refuse";
      }
      continue;
    }
    ASSERT_TRUE(rendered[k].contains("text")) << engine << " failed on " << name << ": " << rendered[k].dump();
    EXPECT_EQ(native.at(name), rendered[k]["text"].get<std::string>()) << name;
  }
  std::cout << engine << ": " << compared << " conversations compared\n";
}

TEST(ChatTemplate, EqualsJinja2AsTransformersRunsIt) {
  compare(
      "Jinja2",
      "/usr/bin/python3 '" + kTemplateTests + "/tokenizer/render_chat_jinja2.py' '" + kTemplate + "' '" + kCases + "'",
      false);
}

TEST(ChatTemplate, EqualsHuggingFaceJinja) {
  if (!std::filesystem::exists(kTemplateTests + "/node_modules/@huggingface/jinja")) {
    FAIL() << "@huggingface/jinja is missing: run scripts/test-deps.sh";
  }
  compare("@huggingface/jinja",
          "node '" + kTemplateTests + "/tokenizer/render_chat_jinja.mjs' '" + kTemplate + "' '" + kCases + "'", true);
}

TEST(ChatTemplate, GenerationPrompts) {
  const std::vector<ChatMessage> messages = {{"user", "Hi", std::nullopt, {}}};
  ChatOptions options;
  EXPECT_EQ(render_chat(messages, options), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  options.enable_thinking = false;
  EXPECT_EQ(render_chat(messages, options),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  options.add_generation_prompt = false;
  EXPECT_EQ(render_chat(messages, options), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, ArgumentsAsJsonString) {
  // OpenAI clients send arguments as a string; it is parsed, keeping key order.
  ChatMessage call{"assistant", "", std::nullopt, {{"f", ojson(R"({"b": 1, "a": [1, {"y": 2, "x": 3}]})")}}};
  const std::string out = render_chat({{"user", "q", std::nullopt, {}}, call}, {ojson::array(), false, true});
  EXPECT_NE(out.find("<parameter=b>\n1\n</parameter>\n<parameter=a>\n[1, {\"y\": 2, \"x\": 3}]\n</parameter>"),
            std::string::npos)
      << out;
}

TEST(ChatTemplate, RefusalsNameTheField) {
  auto refuses = [](std::vector<ChatMessage> m, const std::string& needle) {
    try {
      render_chat(m, {});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refuses({}, "messages");
  refuses({{"robot", "x", std::nullopt, {}}}, "messages[0].role");
  refuses({{"user", "x", std::string("why"), {}}}, "messages[0].reasoning_content");
  refuses({{"user", "x", std::nullopt, {{"f", ojson::object()}}}}, "messages[0].tool_calls");
  refuses({{"user", "x", std::nullopt, {}}, {"assistant", "", std::nullopt, {{"f", ojson("{not json")}}}},
          "messages[1].tool_calls[0].function.arguments");
  refuses({{"user", "x", std::nullopt, {}}, {"assistant", "", std::nullopt, {{"f", ojson(3)}}}},
          "messages[1].tool_calls[0].function.arguments");
  refuses({{"system", "only", std::nullopt, {}}}, "no user message");
  refuses({{"user", "\xff", std::nullopt, {}}}, "messages[0].content");
}

}  // namespace
}  // namespace duet::tokenizer
