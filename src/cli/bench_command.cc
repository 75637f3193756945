// `duet bench`: drives a running `duet serve` over HTTP (/v1/completions, streaming, token-id prompts) at several
// concurrency levels and reports speed, time to first token, failures and, for every request, the sha256 of
// its token ids. With --alone and --serial it also runs every request by itself and all of them one after
// another, and counts the requests whose tokens are equal across the three (the exactness check).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/sha256.h"
#include "cli/bench_http.h"
#include "cli/commands.h"
#include "cli/sse_events.h"

namespace duet::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct BenchFlags {
  std::string url = "http://127.0.0.1:8080";
  std::string levels = "1,4,16";
  int tokens = 64;
  int reps = 2;
  uint64_t seed = 1;
  std::string sampling = "both";
  bool alone = false;
  bool serial = false;
  std::string prompts_file;
  std::string api_key;
  std::string model;
  bool text_prompts = false;
  int prompt_tokens = 0;        // every prompt exactly this many ids (sentences joined, then cut), or 0: 1-3 sentences
  std::string response_format;  // JSON sent as every request's response_format (structured outputs), or empty
  double timeout_s = 600;
  bool decisions = false;   // bench POST /v1/systemone instead (bench_decisions.cc)
  bool same_state = false;  // with decisions: many decisions about one state
  std::string decision_lengths = "500,2000,6000,12000";
  int decision_concurrency = 4;
  bool multi_turn = false;  // one conversation of `turns` turns instead (bench_multi_turn.cc)
  int turns = 4;
  int system_tokens = 2000;
  int reply_tokens = 32;
  int conversations = 1;
};

// Sentences joined into prompts of mixed lengths when no --prompts file is given.
const char* const kBuiltinPrompts[] = {
    "The quick brown fox jumps over the lazy dog.",
    "In a hole in the ground there lived a hobbit.",
    "Write a short poem about the sea at night.",
    "Explain how a hash table handles collisions.",
    "List three uses of a paperclip that are not about paper.",
    "The mitochondria is the powerhouse of the cell, and",
    "Once upon a time, in a kingdom far away, a young engineer",
    "def fibonacci(n):\n    ",
    "Translate to French: The library opens at nine in the morning.",
    "Summarize the rules of chess in two sentences.",
    "What is the capital of Australia, and why is it not Sydney?",
    "A recipe for bread needs flour, water, salt and",
    "SELECT name, count(*) FROM orders GROUP BY",
    "The weather report for tomorrow says",
    "Dear hiring manager, I am writing to apply for",
    "Prove that the square root of two is irrational.",
};

// How each request picks its tokens: greedy, seeded (temperature 0.8, top_p 0.95, seed + prompt index) or penalized
// (greedy with repetition / presence / frequency penalties and a logit_bias).
enum class Sampling { greedy, seeded, penalized };

struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
};

struct RequestResult {
  bool ok = false;
  std::string error;
  std::vector<int32_t> ids;
  double ttft_s = 0;
  double seconds = 0;
  std::string hash() const { return ok ? sha256_of_ids(ids) : "failed"; }
};

class BenchClient {
 public:
  explicit BenchClient(const BenchFlags& flags)
      : flags_(flags), server_{.url = flags.url, .api_key = flags.api_key, .timeout_s = flags.timeout_s} {}

  std::unique_ptr<httplib::Client> connect() const { return server_.connect(); }
  httplib::Headers headers() const { return server_.headers(); }

  std::vector<int32_t> tokenize(const std::string& text) const {
    auto client = connect();
    Json body = {{"prompt", text}};
    auto res = client->Post("/tokenize", headers(), body.dump(), "application/json");
    if (!res) fail("POST {}/tokenize: {}", flags_.url, httplib::to_string(res.error()));
    if (res->status != 200) fail("POST {}/tokenize: HTTP {}: {}", flags_.url, res->status, res->body);
    return Json::parse(res->body).at("tokens").get<std::vector<int32_t>>();
  }

  // How many sequences the engine is running now (nullopt when /metrics cannot be read).
  std::optional<int64_t> running() const {
    auto client = connect();
    auto res = client->Get("/metrics", headers());
    if (!res || res->status != 200) return std::nullopt;
    std::stringstream lines(res->body);
    std::string line;
    while (std::getline(lines, line))
      if (line.starts_with("duet_requests_running")) return std::stoll(line.substr(line.rfind(' ') + 1));
    return std::nullopt;
  }

  // One streamed completion; token ids come back in each chunk's `token_ids` (return_token_ids).
  RequestResult complete(httplib::Client& client, const Prompt& prompt, Sampling sampling, uint64_t seed) const {
    const bool seeded = sampling == Sampling::seeded;
    Json body = {{"max_tokens", flags_.tokens},
                 {"stream", true},
                 {"return_token_ids", true},
                 {"ignore_eos", true},
                 {"temperature", seeded ? 0.8 : 0.0}};
    if (flags_.text_prompts)
      body["prompt"] = prompt.text;
    else
      body["prompt"] = prompt.ids;
    if (seeded) {
      body["seed"] = seed;
      body["top_p"] = 0.95;
    }
    if (sampling == Sampling::penalized) {
      // Greedy with every penalty and a logit_bias: the per-step penalty tables (issue 22's replayed-graph bug).
      body["repetition_penalty"] = 1.2;
      body["presence_penalty"] = 0.4;
      body["frequency_penalty"] = 0.3;
      body["logit_bias"] = {{"11", 2.5}, {"13", -1.5}, {std::to_string(100 + seed % 50), 1.0}};
    }
    if (!flags_.model.empty()) body["model"] = flags_.model;
    if (!flags_.response_format.empty()) body["response_format"] = Json::parse(flags_.response_format);

    RequestResult result;
    std::string raw;
    SseEvents events;
    bool done = false;
    auto start = Clock::now();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = headers();
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      raw.append(data, size);
      return events.feed(data, size, [&](const std::string& data_text) {
        if (data_text == "[DONE]") {
          done = true;
          return true;
        }
        Json chunk = Json::parse(data_text, nullptr, false);
        if (chunk.is_discarded() || chunk.contains("error")) {
          result.error = "stream error: " + data_text;
          return false;
        }
        if (!chunk.contains("choices") || chunk["choices"].empty()) return true;
        const Json& choice = chunk["choices"][0];
        if (choice.contains("token_ids") && choice["token_ids"].is_array())
          for (const Json& id : choice["token_ids"]) {
            if (result.ids.empty()) result.ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
            result.ids.push_back(id.get<int32_t>());
          }
        return true;
      });
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    bool sent = client.send(req, res, error);
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!result.error.empty()) return result;
    if (!sent) {
      result.error = "request failed: " + httplib::to_string(error);
    } else if (res.status != 200) {
      result.error = fmt::format("HTTP {}: {}", res.status, raw);
    } else if (!done) {
      result.error = "the stream ended without [DONE]";
    } else if (flags_.response_format.empty()
                   ? static_cast<int>(result.ids.size()) != flags_.tokens
                   : result.ids.empty() || static_cast<int>(result.ids.size()) > flags_.tokens) {
      result.error = fmt::format("{} tokens came back, {} were asked", result.ids.size(), flags_.tokens);
    } else {
      result.ok = true;
    }
    return result;
  }

 private:
  const BenchFlags& flags_;
  BenchServer server_;
};

struct LevelRun {
  int level = 0;
  std::vector<RequestResult> results;  // by prompt index
  double wall_s = 0;
};

// `level` streams, each sending its `reps` requests one after another on its own connection.
LevelRun run_level(const BenchClient& client, const std::vector<Prompt>& prompts, int level, int reps,
                   Sampling sampling, uint64_t seed) {
  LevelRun run{level, std::vector<RequestResult>(static_cast<size_t>(level * reps)), 0};
  auto start = Clock::now();
  std::vector<std::thread> streams;
  for (int s = 0; s < level; ++s)
    streams.emplace_back([&, s] {
      auto connection = client.connect();
      for (int r = 0; r < reps; ++r) {
        size_t p = static_cast<size_t>(s * reps + r);
        run.results[p] = client.complete(*connection, prompts[p], sampling, seed + p);
      }
    });
  for (auto& stream : streams) stream.join();
  run.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void report_level(const LevelRun& run, int reps, const char* sampling) {
  int64_t tokens = 0, failed = 0;
  std::vector<double> ttft, per_stream;
  for (int s = 0; s < run.level; ++s) {
    int64_t stream_tokens = 0;
    double stream_seconds = 0;
    for (int r = 0; r < reps; ++r) {
      const auto& result = run.results[static_cast<size_t>(s * reps + r)];
      if (!result.ok) {
        ++failed;
        continue;
      }
      stream_tokens += static_cast<int64_t>(result.ids.size());
      stream_seconds += result.seconds;
      ttft.push_back(result.ttft_s);
    }
    tokens += stream_tokens;
    if (stream_seconds > 0) per_stream.push_back(static_cast<double>(stream_tokens) / stream_seconds);
  }
  double mean_stream = per_stream.empty() ? 0
                                          : std::accumulate(per_stream.begin(), per_stream.end(), 0.0) /
                                                static_cast<double>(per_stream.size());
  std::printf(
      "level %d (%s): %zu requests, %lld tokens in %.2f s: aggregate %.1f tok/s, per stream %.1f tok/s, "
      "ttft p50 %.1f ms, failed %lld\n",
      run.level, sampling, run.results.size(), static_cast<long long>(tokens), run.wall_s,
      run.wall_s > 0 ? static_cast<double>(tokens) / run.wall_s : 0.0, mean_stream, median(ttft) * 1e3,
      static_cast<long long>(failed));
}

int bench(const BenchFlags& flags) {
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<int> levels = parse_positive_list(flags.levels, "--levels");
  if (flags.tokens < 1) fail("--tokens {}: must be at least 1", flags.tokens);
  if (flags.reps < 1) fail("--reps {}: must be at least 1", flags.reps);
  if (flags.prompt_tokens < 0) fail("--prompt-tokens {}: must be 0 or more", flags.prompt_tokens);
  if (flags.prompt_tokens > 0 && flags.text_prompts) fail("--prompt-tokens: token-id prompts only (not with --text)");
  if (!flags.response_format.empty() && !Json::accept(flags.response_format))
    fail("--response-format: not JSON: {}", flags.response_format);
  std::vector<std::pair<const char*, Sampling>> modes;
  const std::string& s = flags.sampling;
  if (s == "greedy" || s == "both" || s == "all") modes.emplace_back("greedy", Sampling::greedy);
  if (s == "seeded" || s == "both" || s == "all") modes.emplace_back("seeded", Sampling::seeded);
  if (s == "penalized" || s == "all") modes.emplace_back("penalized", Sampling::penalized);
  if (modes.empty()) fail("--sampling {}: use greedy, seeded, penalized, both (greedy and seeded) or all", s);

  std::vector<std::string> sentences(std::begin(kBuiltinPrompts), std::end(kBuiltinPrompts));
  if (!flags.prompts_file.empty()) {
    std::ifstream file(flags.prompts_file);
    if (!file) fail("--prompts {}: cannot read it", flags.prompts_file);
    sentences.clear();
    for (std::string line; std::getline(file, line);)
      if (!line.empty()) sentences.push_back(line);
    if (sentences.empty()) fail("--prompts {}: no prompts in it", flags.prompts_file);
  }

  BenchClient client(flags);
  size_t count = static_cast<size_t>(*std::max_element(levels.begin(), levels.end()) * flags.reps);
  std::vector<Prompt> prompts(count);
  for (size_t p = 0; p < count; ++p) {
    if (flags.prompt_tokens > 0) {  // a fixed length: sentences from the p-th on (each prompt its own start) until
      // the ids reach it, then cut there
      for (size_t k = 0; static_cast<int>(prompts[p].ids.size()) < flags.prompt_tokens; ++k) {
        if (k > static_cast<size_t>(flags.prompt_tokens)) fail("--prompt-tokens: the prompts tokenize to nothing");
        prompts[p].text += sentences[(p + k * 7) % sentences.size()] + " ";
        prompts[p].ids = client.tokenize(prompts[p].text);
      }
      prompts[p].ids.resize(static_cast<size_t>(flags.prompt_tokens));
      continue;
    }
    // Mixed lengths: one to three sentences.
    for (size_t k = 0; k <= p % 3; ++k) prompts[p].text += sentences[(p + k * 7) % sentences.size()] + " ";
    if (!flags.text_prompts) prompts[p].ids = client.tokenize(prompts[p].text);
  }

  int64_t equal = 0, unequal = 0, failed = 0;
  for (auto [name, sampling] : modes) {
    std::vector<LevelRun> runs;
    for (int level : levels) {
      runs.push_back(run_level(client, prompts, level, flags.reps, sampling, flags.seed));
      report_level(runs.back(), flags.reps, name);
    }
    std::vector<RequestResult> alone, serial;
    if (flags.alone) {
      // Each request by itself: wait until the engine runs nothing, then send it on a fresh connection.
      for (size_t p = 0; p < count; ++p) {
        for (int wait = 0; wait < 200 && client.running().value_or(0) > 0; ++wait)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        auto connection = client.connect();
        alone.push_back(client.complete(*connection, prompts[p], sampling, flags.seed + p));
      }
    }
    if (flags.serial) {
      // All requests back to back on one connection, in reverse order, so each follows a different neighbour
      // than in the level runs.
      serial.resize(count);
      auto connection = client.connect();
      for (size_t p = count; p-- > 0;) serial[p] = client.complete(*connection, prompts[p], sampling, flags.seed + p);
    }
    for (const auto& run : runs) {
      for (size_t p = 0; p < run.results.size(); ++p) {
        const auto& result = run.results[p];
        std::string verdict;
        bool any_failed = !result.ok || (flags.alone && !alone[p].ok) || (flags.serial && !serial[p].ok);
        bool same = (!flags.alone || alone[p].ids == result.ids) && (!flags.serial || serial[p].ids == result.ids);
        if (flags.alone || flags.serial) {
          verdict = any_failed ? " failed" : same ? " equal" : " UNEQUAL";
          if (any_failed)
            ++failed;
          else if (same)
            ++equal;
          else
            ++unequal;
        } else if (!result.ok) {
          ++failed;
        }
        std::printf("request level=%d sampling=%s index=%zu tokens=%zu ttft_ms=%.1f sha256=%s", run.level, name, p,
                    result.ids.size(), result.ttft_s * 1e3, result.hash().c_str());
        if (flags.alone) std::printf(" alone=%s", alone[p].hash().c_str());
        if (flags.serial) std::printf(" serial=%s", serial[p].hash().c_str());
        std::printf("%s\n", verdict.c_str());
        const RequestResult* no_result = nullptr;
        for (const RequestResult* failure :
             {&result, flags.alone ? &alone[p] : no_result, flags.serial ? &serial[p] : no_result})
          if (failure && !failure->ok) std::printf("  error: %s\n", failure->error.c_str());
      }
    }
  }
  if (flags.alone || flags.serial)
    std::printf("exactness: %lld equal, %lld unequal, %lld failed\n", static_cast<long long>(equal),
                static_cast<long long>(unequal), static_cast<long long>(failed));
  else
    std::printf("failed: %lld\n", static_cast<long long>(failed));
  std::fflush(stdout);
  return unequal > 0 || failed > 0 ? 1 : 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand("bench", "Drive a running `duet serve` and report speed and exactness");
  cmd->add_option("--url", flags->url, "The server")->capture_default_str();
  cmd->add_option("--levels", flags->levels, "Concurrent streams, comma-separated")->capture_default_str();
  cmd->add_option("--tokens", flags->tokens, "Tokens generated per request (ignore_eos)")->capture_default_str();
  cmd->add_option("--reps", flags->reps, "Requests each stream sends, one after another")->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Base seed of seeded sampling (request i uses seed + i)")
      ->capture_default_str();
  cmd->add_option("--sampling", flags->sampling,
                  "greedy, seeded, penalized (greedy with penalties and logit_bias), both (greedy and seeded) or all")
      ->capture_default_str();
  cmd->add_flag("--alone", flags->alone, "Also run every request by itself and compare its tokens");
  cmd->add_flag("--serial", flags->serial, "Also run all requests one after another and compare their tokens");
  cmd->add_option("--prompts", flags->prompts_file, "Prompt sentences, one per line (default: built-in)");
  cmd->add_option("--api-key", flags->api_key, "Sent as `Authorization: Bearer KEY`");
  cmd->add_option("--model", flags->model, "The model id to send (default: none, the server's own)");
  cmd->add_flag("--text", flags->text_prompts, "Send text prompts instead of token ids from /tokenize");
  cmd->add_option("--prompt-tokens", flags->prompt_tokens,
                  "Every prompt exactly this many token ids (its sentences joined, then cut); 0: 1-3 sentences each")
      ->capture_default_str();
  cmd->add_option("--response-format", flags->response_format,
                  "JSON sent as every request's response_format (e.g. a json_schema): the cost of structured outputs; "
                  "a request may then end before --tokens, when its document is complete");
  cmd->add_option("--timeout", flags->timeout_s, "Seconds to wait for one response")->capture_default_str();
  cmd->add_flag("--decisions", flags->decisions,
                "Bench decisions (POST /v1/systemone): latency per prompt length, alone and concurrent, and equality");
  cmd->add_option("--decision-lengths", flags->decision_lengths,
                  "With --decisions: target prompt lengths in tokens, comma-separated (those over the server's "
                  "context are skipped)")
      ->capture_default_str();
  cmd->add_option("--decision-concurrency", flags->decision_concurrency,
                  "With --decisions: decisions sent at once in the concurrent run")
      ->capture_default_str();
  cmd->add_flag(
      "--same-state", flags->same_state,
      "With --decisions: per length one state and 1 + concurrency x reps decisions about it, each with its own "
      "questions, one at a time (the later ones resume the state from the prompt cache)");
  cmd->add_flag("--multi-turn", flags->multi_turn,
                "Bench one conversation of --turns turns (chat, streaming, greedy): per turn the prompt's tokens, the "
                "tokens resumed from the prompt cache, time to first token");
  cmd->add_option("--turns", flags->turns, "With --multi-turn: user turns")->capture_default_str();
  cmd->add_option("--system-tokens", flags->system_tokens, "With --multi-turn: the system prompt's length in tokens")
      ->capture_default_str();
  cmd->add_option("--reply-tokens", flags->reply_tokens, "With --multi-turn: max_tokens of each reply")
      ->capture_default_str();
  cmd->add_option("--conversations", flags->conversations,
                  "With --multi-turn: conversations (each its own system prompt) taking turns, one request at a time")
      ->capture_default_str();
  cmd->callback([flags] {
    const BenchServer server{.url = flags->url, .api_key = flags->api_key, .timeout_s = flags->timeout_s};
    if (flags->multi_turn) {
      if (bench_multi_turn({.server = server,
                            .model = flags->model,
                            .turns = flags->turns,
                            .system_tokens = flags->system_tokens,
                            .reply_tokens = flags->reply_tokens,
                            .conversations = flags->conversations}) != 0)
        fail("duet bench: a turn failed (see above)");
      return;
    }
    const int status =
        flags->decisions
            ? bench_decisions({.server = {.url = flags->url, .api_key = flags->api_key, .timeout_s = flags->timeout_s},
                               .model = flags->model,
                               .lengths = flags->decision_lengths,
                               .concurrency = flags->decision_concurrency,
                               .reps = flags->reps,
                               .same_state = flags->same_state})
            : bench(*flags);
    if (status != 0) fail("duet bench: some requests failed or were unequal (see above)");
  });
}

}  // namespace duet::cli
