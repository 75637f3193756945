// `duet bench --multi-turn`: one conversation of N turns against a running `duet serve`, as a chat UI or a coding
// agent sends it: a long system prompt, then each turn the whole conversation so far plus a new user message
// (/v1/chat/completions, streaming, greedy). Per turn: the prompt's tokens, how many of them the server resumed
// from its prompt cache (usage.prompt_tokens_details.cached_tokens), the time to the first streamed token and the
// whole reply's time. Run it against a server with the cache on and one with `--prompt-cache-gib 0` to compare.
// With --conversations N, N such conversations (each its own system prompt) take turns, one request at a time: what
// several agent sessions on one server look like, and what pushes each other's entries out of a small prompt cache
// (into its host tier, --prompt-cache-host-gib, when there is one).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_http.h"
#include "cli/sse_events.h"

namespace duet::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

const char* const kRules[] = {
    "Read the whole file before you change any line of it.",
    "Keep every change small and explain why it is needed.",
    "Run the tests after each change and report their output.",
    "Never delete a test to make a build pass.",
    "Prefer the standard library to a new dependency.",
    "Name functions after what they do, not how they do it.",
    "When a command fails, show the error and the command.",
    "Ask before touching files outside the project.",
};

const char* const kQuestions[] = {
    "What does the build script do first?",
    "Which test covers the parser?",
    "Why does the server bind to the loopback address?",
    "How are errors reported to the client?",
    "Where is the configuration read?",
    "What happens when the queue is full?",
};

struct Turn {
  bool ok = false;
  std::string error;
  std::string reply;
  int prompt_tokens = 0, cached_tokens = 0;
  double ttft_s = 0, seconds = 0;
  double first_chunk_s = 0;  // the first chunk with a choice: the time to first token of a reply with no text
};

class MultiTurnBench {
 public:
  explicit MultiTurnBench(const MultiTurnOptions& options) : options_(options) {}

  void discover() {
    auto client = options_.server.connect();
    auto res = client->Get("/v1/models", options_.server.headers());
    if (!res || res->status != 200) fail("GET {}/v1/models failed", options_.server.url);
    model_ =
        options_.model.empty() ? Json::parse(res->body).at("data").at(0).at("id").get<std::string>() : options_.model;
  }

  // Numbered rules until the system prompt alone is at least the target's tokens (counted by the server).
  std::string system_prompt(int conversation) const {
    auto client = options_.server.connect();
    // The session number first: conversations share no block of their prompts.
    std::string text =
        fmt::format("Session {}. You are a careful coding assistant. Follow these rules.\n", conversation + 1);
    for (int n = 1;; ++n) {
      text += fmt::format("Rule {}: {}\n", n, kRules[n % std::size(kRules)]);
      if (n % 16 != 0) continue;
      auto res =
          client->Post("/tokenize", options_.server.headers(), Json({{"prompt", text}}).dump(), "application/json");
      if (!res || res->status != 200) fail("POST {}/tokenize failed", options_.server.url);
      if (Json::parse(res->body).at("count").get<int>() >= options_.system_tokens) return text;
    }
  }

  Turn send(httplib::Client& client, const Json& messages) const {
    const Json body = {{"model", model_},  {"messages", messages},
                       {"stream", true},   {"stream_options", {{"include_usage", true}}},
                       {"temperature", 0}, {"max_tokens", options_.reply_tokens}};
    Turn turn;
    SseEvents events;
    bool done = false;
    std::string raw;
    const auto start = Clock::now();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.headers = options_.server.headers();
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      raw.append(data, std::min<size_t>(size, 2000));
      return events.feed(data, size, [&](const std::string& payload) {
        if (payload == "[DONE]") {
          done = true;
          return true;
        }
        const Json chunk = Json::parse(payload, nullptr, false);
        if (chunk.is_discarded() || chunk.contains("error")) {
          turn.error = "stream error: " + payload.substr(0, 300);
          return false;
        }
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
          turn.prompt_tokens = chunk["usage"].value("prompt_tokens", 0);
          if (const auto details = chunk["usage"].find("prompt_tokens_details");
              details != chunk["usage"].end() && details->is_object())
            turn.cached_tokens = details->value("cached_tokens", 0);
        }
        if (!chunk.contains("choices") || chunk["choices"].empty()) return true;
        if (turn.first_chunk_s == 0) turn.first_chunk_s = std::chrono::duration<double>(Clock::now() - start).count();
        const Json& delta = chunk["choices"][0].value("delta", Json::object());
        for (const char* key : {"content", "reasoning_content"})
          if (delta.contains(key) && delta[key].is_string() && !delta[key].get<std::string>().empty()) {
            if (turn.ttft_s == 0) turn.ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
            if (std::string_view(key) == "content") turn.reply += delta[key].get<std::string>();
          }
        return true;
      });
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool sent = client.send(req, res, error);
    turn.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!turn.error.empty()) return turn;
    if (turn.ttft_s == 0) turn.ttft_s = turn.first_chunk_s;
    if (!sent)
      turn.error = "request failed: " + httplib::to_string(error);
    else if (res.status != 200)
      turn.error = fmt::format("HTTP {}: {}", res.status, raw.substr(0, 300));
    else if (!done)
      turn.error = "the stream ended without [DONE]";
    else if (turn.prompt_tokens == 0)
      turn.error = "no usage chunk (stream_options.include_usage)";
    else
      turn.ok = true;
    return turn;
  }

  int run() {
    discover();
    const int n = options_.conversations;
    std::vector<Json> conversations;
    for (int c = 0; c < n; ++c)
      conversations.push_back(Json::array({{{"role", "system"}, {"content", system_prompt(c)}}}));
    auto client = options_.server.connect();
    std::printf("multi-turn: %d conversation(s) of %d turns, replies of up to %d tokens, model %s, %s\n", n,
                options_.turns, options_.reply_tokens, model_.c_str(), options_.server.url.c_str());
    std::printf("%5s %5s %14s %14s %10s %10s\n", "turn", "conv", "prompt tokens", "cached tokens", "ttft ms",
                "total ms");
    int failed = 0;
    double first_ttft = 0, later_ttft = 0;
    for (int t = 0; t < options_.turns && failed == 0; ++t)
      for (int c = 0; c < n; ++c) {
        Json& messages = conversations[static_cast<size_t>(c)];
        messages.push_back({{"role", "user"}, {"content", kQuestions[t % std::size(kQuestions)]}});
        const Turn turn = send(*client, messages);
        if (!turn.ok) {
          std::printf("%5d %5d  error: %s\n", t + 1, c + 1, turn.error.c_str());
          ++failed;
          break;  // the next turn would repeat a conversation that did not happen
        }
        std::printf("%5d %5d %14d %14d %10.1f %10.1f\n", t + 1, c + 1, turn.prompt_tokens, turn.cached_tokens,
                    turn.ttft_s * 1e3, turn.seconds * 1e3);
        (t == 0 ? first_ttft : later_ttft) += turn.ttft_s;
        messages.push_back({{"role", "assistant"}, {"content", turn.reply}});
      }
    if (failed == 0 && options_.turns > 1)
      std::printf("ttft: first turn %.1f ms, later turns %.1f ms on average\n", first_ttft * 1e3 / n,
                  later_ttft * 1e3 / ((options_.turns - 1) * n));
    std::fflush(stdout);
    return failed == 0 ? 0 : 1;
  }

 private:
  const MultiTurnOptions& options_;
  std::string model_;
};

}  // namespace

int bench_multi_turn(const MultiTurnOptions& options) {
  if (options.turns < 1 || options.reply_tokens < 1 || options.system_tokens < 1 || options.conversations < 1)
    fail("--multi-turn: --turns, --reply-tokens, --system-tokens and --conversations must be positive");
  return MultiTurnBench(options).run();
}

}  // namespace duet::cli
