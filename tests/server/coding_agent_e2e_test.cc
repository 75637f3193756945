// A coding-agent CLI from the npm registry, with its default prompt and tools, for one non-interactive turn against
// `duet serve` on the demo model: Claude Code (@anthropic-ai/claude-code, pinned in tests/package.json; its native
// binary comes in @anthropic-ai/claude-code-linux-x64) through the Messages API. Its prompt is about 17K tokens of
// the demo tokenizer, which the demo's 65,536-position context holds (the default before was 4,096: it did not fit).
// The only flags it gets are where the server is, a key and the model's name. The demo (trained) ends its reply with
// <|im_end|> after some tens of tokens; Claude Code treats a reply stopped at max_tokens as an error (exit 1,
// "exceeded the output token maximum"), so the exit code also checks that the turn ended as the model ended it. The
// server's --context still bounds a reply that would not end. Most of the time is the 17K-token prefill on the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "../run_command.h"
#include "server_process.h"

namespace duet::testing {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(CodingAgent, ClaudeCodeAnswersOneTurnWithItsDefaultPrompt) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
#if !defined(__x86_64__)
  GTEST_SKIP() << "the pinned Claude Code binary is the linux-x64 one";
#endif
  const std::string binary = tests_dir() + "/node_modules/@anthropic-ai/claude-code-linux-x64/claude";
  if (!std::filesystem::exists(binary)) FAIL() << binary << " is missing: run scripts/test-deps.sh";
  ServerProcess server({"--context", "18944"});
  // Its own home (settings, session files) and an empty working directory, removed afterwards.
  const auto root = std::filesystem::temp_directory_path() / ("duet-coding-agent-" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "home");
  std::filesystem::create_directories(root / "work");
  const auto agent = [&](const std::string& extra_env) {
    return run_command("cd '" + (root / "work").string() + "' && env -i PATH=/usr/bin:/bin HOME='" +
                       (root / "home").string() + "' ANTHROPIC_BASE_URL=" + server.url() +
                       " ANTHROPIC_API_KEY=sk-duet-test DISABLE_TELEMETRY=1"
                       " CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 " +
                       extra_env + " timeout 600 '" + binary + "' -p 'Say hello.' --model demo 2>&1");
  };
  const CommandResult result = agent("");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find_first_not_of(" \n"), std::string::npos) << "no answer printed";
  // Planted control: the same turn with the agent's output budget at 2 tokens (its own setting) is cut at max_tokens
  // by the server, which Claude Code must report as a failure: exit 0 above means the turn was not cut. Claude Code
  // asks three times more to continue a cut reply before it gives up, each with its user turn changed (a note
  // appended): those resume the system prompt and tool list from the prompt cache (the state kept where the leading
  // system turn ends, engine/request.h), checked below.
  const CommandResult cut = agent("CLAUDE_CODE_MAX_OUTPUT_TOKENS=2");
  EXPECT_NE(cut.status, 0) << cut.output;
  std::filesystem::remove_all(root);

  // The turn on the server: a Messages request answered 200, its prompt the agent's whole default (system prompt,
  // environment and tool list: well over 15,000 tokens), not a trimmed one.
  const std::string log = read_file(server.log_path());
  const std::regex turn(R"(route="/v1/messages" status=200 .*prompt_tokens=(\d+))");
  int64_t largest = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), turn); it != std::sregex_iterator(); ++it)
    largest = std::max<int64_t>(largest, std::stoll((*it)[1].str()));
  EXPECT_GT(largest, 15000) << log;

  // The continuations resumed the agent's system prompt and tools (about 13,700 tokens of the demo tokenizer) instead
  // of prefilling them again: before the cache kept the state where the system turn ends, they resumed nothing. The
  // last Messages request is the last continuation (the control's first request repeats the turn above and resumes
  // it whole, so it does not count).
  const std::regex resumed(R"(route="/v1/messages" status=200 .*cached_tokens=(\d+))");
  int64_t last_resumed = -1;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), resumed); it != std::sregex_iterator(); ++it)
    last_resumed = std::stoll((*it)[1].str());
  EXPECT_GT(last_resumed, 12000) << log;
}

}  // namespace
}  // namespace duet::testing
