// `duet bench --decisions`: decision latency against a running `duet serve` (POST /v1/systemone), per prompt-length
// bucket, one decision at a time and N at once, and the exactness check: every concurrent answer must equal the
// same request's answer alone, byte for byte.
//
// Requests: the spec's three questions (a noul, a 2-option choice, a 3-level score) over a state of ticket notes,
// grown until the prompt reaches each target length (measured with /tokenize on the state, which the server
// tokenizes on its own); each request of a length gets its own state.
//
// `--same-state` instead asks many decisions about one state per length, each with its own questions (the
// instructions name a variant): the first prefills the state, the later ones resume it from the prompt cache (issue
// 18); it prints the first's latency, the later ones' p50 / p95 and the tokens they resumed.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/bench_http.h"

namespace duet::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;  // the questions' order is part of the prompt

const char* const kNotes[] = {
    "checkout fails with error 502 after the payment step",
    "the customer was charged twice for one order",
    "refund requested for a damaged parcel",
    "login works but the invoice page stays blank",
    "shipping label printed with the wrong address",
    "latency on the search page above four seconds since the deploy",
    "a coupon code is rejected although it has not expired",
    "the mobile app crashes when a photo is attached",
};

Json questions() {
  return Json::parse(R"({
    "urgent": {"type": "noul", "instructions": "Is the ticket urgent?"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Money", "tech": null}},
    "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}})");
}

Json questions_variant(int variant) {
  Json q = questions();
  for (auto& [id, question] : q.items())
    question["instructions"] = fmt::format("{} (review {})", question["instructions"].get<std::string>(), variant);
  return q;
}

// The response without its report of the tokens the prompt cache resumed, which depends on what ran before (parsed
// and written again, every double exactly: bodies compare by value, in the server's key order).
std::string without_cached_tokens(const std::string& body) {
  Json parsed = Json::parse(body);
  parsed.at("usage").erase("input_tokens_details");
  return parsed.dump();
}

struct Answer {
  bool ok = false;
  std::string body;  // the response without its cache report, compared byte for byte
  int cached_tokens = 0;
  std::string error;
  int input_tokens = 0;
  double seconds = 0;
  double prefill_ms = 0, head_ms = 0;  // the server's Server-Timing: where the time went
};

class DecisionBench {
 public:
  explicit DecisionBench(const DecisionBenchOptions& options) : options_(options) {}

  // The model id (the flag's, or the server's own) and the server's context; refuses a server without decisions.
  void discover() {
    auto client = options_.server.connect();
    auto res = client->Get("/v1/models", options_.server.headers());
    if (!res || res->status != 200) fail("GET {}/v1/models failed", options_.server.url);
    const Json model = Json::parse(res->body).at("data").at(0);
    model_ = options_.model.empty() ? model.at("id").get<std::string>() : options_.model;
    context_ = model.value("max_model_len", 0);
    if (!model.value("decisions", false))
      fail("{} serves no decisions (its model folder has no joint head)", options_.server.url);
  }

  Answer decide(httplib::Client& client, const std::string& state, int variant = -1) const {
    Json body = {
        {"model", model_}, {"state", state}, {"questions", variant < 0 ? questions() : questions_variant(variant)}};
    Answer answer;
    const auto start = Clock::now();
    auto res = client.Post("/v1/systemone", options_.server.headers(), body.dump(), "application/json");
    answer.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!res) {
      answer.error = "request failed: " + httplib::to_string(res.error());
    } else if (res->status != 200) {
      answer.error = fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 300));
    } else {
      answer.ok = true;
      answer.body = without_cached_tokens(res->body);
      const Json usage = Json::parse(res->body).at("usage");
      answer.input_tokens = usage.at("input_tokens");
      if (usage.contains("input_tokens_details")) answer.cached_tokens = usage["input_tokens_details"]["cached_tokens"];
      const std::string timing = res->get_header_value("Server-Timing");
      if (std::sscanf(timing.c_str(), "prefill;dur=%lf, head;dur=%lf", &answer.prefill_ms, &answer.head_ms) != 2)
        answer.prefill_ms = answer.head_ms = 0;  // an older server: no breakdown
    }
    return answer;
  }

  int state_tokens(const std::string& state) const {
    auto client = options_.server.connect();
    auto res =
        client->Post("/tokenize", options_.server.headers(), Json({{"prompt", state}}).dump(), "application/json");
    if (!res || res->status != 200) fail("POST {}/tokenize failed", options_.server.url);
    return Json::parse(res->body).at("count");
  }

  // A state of notes whose prompt is about `target` tokens: the most notes that keep it within the target.
  std::string state_for(int target, int fixed, int variant) const {
    const auto notes = [&](int count) {
      std::string text = fmt::format("Ticket batch {}.", variant);
      for (int i = 0; i < count; ++i) text += fmt::format(" Note {}: {}.", i + 1, kNotes[(i + variant) % 8]);
      return text;
    };
    int low = 0, high = 1;
    while (fixed + state_tokens(notes(high)) <= target) high *= 2;
    while (high - low > 1) {  // the most notes that fit: fixed + tokens(notes(low)) <= target < ...(high)
      const int mid = (low + high) / 2;
      (fixed + state_tokens(notes(mid)) <= target ? low : high) = mid;
    }
    return notes(low);
  }

  const std::string& model() const { return model_; }
  int context() const { return context_; }

 private:
  const DecisionBenchOptions& options_;
  std::string model_;
  int context_ = 0;
};

// Nearest-rank percentile of latencies in seconds.
double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::max<size_t>(rank, 1) - 1];
}

std::string bucket_of(int tokens) {
  if (tokens <= 1024) return "<=1K";
  if (tokens <= 4096) return "1-4K";
  if (tokens <= 10240) return "4-10K";
  return "10-16K";
}

// --same-state: per length, one state and 1 + concurrency x reps decisions about it, one at a time.
int bench_same_state(const DecisionBenchOptions& options, const DecisionBench& bench, int fixed, int budget) {
  int failed = 0;
  const int later = options.concurrency * options.reps;
  for (int target : parse_positive_list(options.lengths, "--decision-lengths")) {
    if (target > budget || target <= fixed) {
      std::printf("length %d: skipped (the prompt must be over %d and within the budget %d)\n", target, fixed, budget);
      continue;
    }
    const std::string state = bench.state_for(target, fixed, target);
    auto client = options.server.connect();
    const Answer first = bench.decide(*client, state, 0);
    std::vector<double> seconds, cached;
    for (int v = 1; v <= later; ++v) {
      const Answer answer = bench.decide(*client, state, v);
      if (!answer.ok) {
        std::printf("  error (length %d, decision %d): %s\n", target, v, answer.error.c_str());
        ++failed;
        continue;
      }
      seconds.push_back(answer.seconds);
      cached.push_back(answer.cached_tokens);
    }
    if (!first.ok) {
      std::printf("  error (length %d, the first decision): %s\n", target, first.error.c_str());
      ++failed;
      continue;
    }
    std::printf(
        "length %d (%d tokens): first %.1f ms (resumed %d tokens); %zu later decisions about the same state: p50 %.1f "
        "ms p95 %.1f ms, resumed p50 %.0f tokens\n",
        target, first.input_tokens, first.seconds * 1e3, first.cached_tokens, seconds.size(),
        percentile(seconds, 0.5) * 1e3, percentile(seconds, 0.95) * 1e3, percentile(cached, 0.5));
  }
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

}  // namespace

int bench_decisions(const DecisionBenchOptions& options) {
  if (options.concurrency < 1) fail("--decision-concurrency {}: must be at least 1", options.concurrency);
  if (options.reps < 1) fail("--reps {}: must be at least 1", options.reps);
  const std::vector<int> lengths = parse_positive_list(options.lengths, "--decision-lengths");
  DecisionBench bench(options);
  bench.discover();
  // The prompt without its state (and a first decision to warm the server up).
  auto warm = options.server.connect();
  const Answer empty = bench.decide(*warm, "");
  if (!empty.ok) fail("a decision with an empty state failed: {}", empty.error);
  const int fixed = empty.input_tokens;
  const int budget = std::min(16384, bench.context());
  std::printf("decisions on %s (`%s`): %d prompt tokens without the state, budget %d; %d at once, %d each%s\n",
              options.server.url.c_str(), bench.model().c_str(), fixed, budget, options.concurrency, options.reps,
              options.same_state ? "; the same state" : "");
  if (options.same_state) return bench_same_state(options, bench, fixed, budget);

  int64_t equal = 0, unequal = 0, failed = 0;
  for (int target : lengths) {
    if (target > budget || target <= fixed) {
      std::printf("length %d: skipped (the prompt must be over %d and within the budget %d)\n", target, fixed, budget);
      continue;
    }
    const int count = options.concurrency * options.reps;
    std::vector<std::string> states;
    for (int i = 0; i < count; ++i) states.push_back(bench.state_for(target, fixed, i));

    std::vector<Answer> alone;  // one at a time, on one connection
    auto connection = options.server.connect();
    for (const auto& state : states) alone.push_back(bench.decide(*connection, state));

    std::vector<Answer> together(states.size());  // `concurrency` streams, each sending its reps in turn
    const auto together_start = std::chrono::steady_clock::now();
    std::vector<std::thread> streams;
    for (int s = 0; s < options.concurrency; ++s)
      streams.emplace_back([&, s] {
        auto client = options.server.connect();
        for (int r = 0; r < options.reps; ++r) {
          const size_t i = static_cast<size_t>(s * options.reps + r);
          together[i] = bench.decide(*client, states[i]);
        }
      });
    for (auto& stream : streams) stream.join();
    // Decisions per second while `concurrency` clients send theirs back to back: the answered ones over the wall time.
    const double together_wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - together_start).count();

    std::vector<double> alone_s, together_s, prefill_ms, head_ms;
    int tokens = 0, length_equal = 0, length_unequal = 0, length_failed = 0;
    for (size_t i = 0; i < states.size(); ++i) {
      for (const Answer* answer : {&alone[i], &together[i]})
        if (!answer->ok) std::printf("  error (length %d, request %zu): %s\n", target, i, answer->error.c_str());
      if (!alone[i].ok || !together[i].ok) {
        ++length_failed;
        continue;
      }
      alone_s.push_back(alone[i].seconds);
      together_s.push_back(together[i].seconds);
      prefill_ms.push_back(alone[i].prefill_ms);
      head_ms.push_back(alone[i].head_ms);
      tokens = std::max(tokens, alone[i].input_tokens);
      if (alone[i].body == together[i].body) {
        ++length_equal;
      } else {
        ++length_unequal;
        std::printf("  UNEQUAL (length %d, request %zu):\n    alone    %s\n    together %s\n", target, i,
                    alone[i].body.c_str(), together[i].body.c_str());
      }
    }
    std::printf(
        "length %d (bucket %s, up to %d tokens): alone p50 %.1f ms p95 %.1f ms (server: prefill p50 %.1f ms, head p50 "
        "%.1f ms); %d at once p50 %.1f ms p95 %.1f ms, %.1f decisions/s; %d equal, %d unequal, %d failed\n",
        target, bucket_of(tokens).c_str(), tokens, percentile(alone_s, 0.5) * 1e3, percentile(alone_s, 0.95) * 1e3,
        percentile(prefill_ms, 0.5), percentile(head_ms, 0.5), options.concurrency, percentile(together_s, 0.5) * 1e3,
        percentile(together_s, 0.95) * 1e3,
        together_wall > 0 ? static_cast<double>(together_s.size()) / together_wall : 0.0, length_equal, length_unequal,
        length_failed);
    equal += length_equal;
    unequal += length_unequal;
    failed += length_failed;
  }
  std::printf("exactness: %lld equal, %lld unequal, %lld failed\n", static_cast<long long>(equal),
              static_cast<long long>(unequal), static_cast<long long>(failed));
  std::fflush(stdout);
  return unequal > 0 || failed > 0 || equal == 0 ? 1 : 0;
}

}  // namespace duet::cli
