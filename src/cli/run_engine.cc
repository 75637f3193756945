#include "cli/run_engine.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <variant>

#include "base/error.h"

namespace duet::cli {

namespace {

struct Outcome {
  std::vector<std::vector<int32_t>> ids;  // per stream
  engine::EngineStats stats;
  double decode_s = 0;  // from the last stream's first token to the end
};

Outcome run_once(model::Model& model, const EngineRun& run, const engine::DraftOptions& draft) {
  engine::EngineOptions options;
  options.parallel = run.streams;
  options.context = static_cast<int32_t>(run.prompt.size()) + run.max_tokens;
  options.draft = draft;
  engine::Engine engine(model, nullptr, options);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (int32_t i = 0; i < run.streams; ++i) {
    engine::Request request;
    request.prompt.assign(run.prompt.begin(), run.prompt.end());
    request.sampling.max_tokens = run.max_tokens;
    request.sampling.ignore_eos = run.ignore_eos;
    request.sampling.temperature = run.temperature;
    request.sampling.seed = 1 + static_cast<uint64_t>(i);
    handles.push_back(engine.submit(std::move(request)));
  }
  Outcome out;
  out.ids.resize(handles.size());
  double first_token_s = 0;
  for (size_t i = 0; i < handles.size(); ++i)
    for (;;) {
      const std::optional<engine::Event> event = handles[i]->next(std::chrono::milliseconds(600000));
      if (!event) fail("duet run: no event from the engine in 10 minutes");
      if (const auto* token = std::get_if<engine::TokenEvent>(&*event)) {
        out.ids[i].push_back(token->id);
        continue;
      }
      const auto& finished = std::get<engine::FinishedEvent>(*event);
      if (finished.reason == engine::FinishReason::error) fail("duet run: {}", finished.error);
      if (finished.matched_stop_token) out.ids[i].push_back(*finished.matched_stop_token);
      first_token_s = std::max(first_token_s, finished.time_to_first_token_s);
      break;
    }
  out.decode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - first_token_s;
  // The last step's counters land just after its sequences finish: the engine, idle now, has written them by then.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  out.stats = engine.stats();
  return out;
}

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a fixed, well-spread draw per position
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The oracle: stream s's plain continuation from where it is, each token replaced by another with probability
// 1 - acceptance (a fixed draw per stream and position, so runs repeat).
engine::DraftOptions oracle(const EngineRun& run, std::vector<std::vector<int32_t>> continuations, int32_t vocab) {
  engine::DraftOptions draft = run.draft;
  draft.test_oracle = [continuations = std::move(continuations), acceptance = run.oracle_acceptance, vocab](
                          const engine::Request& request, std::span<const int32_t> generated, int32_t count) {
    const std::vector<int32_t>& truth = continuations.at(request.sampling.seed - 1);
    std::vector<int32_t> drafts;
    for (size_t p = generated.size(); p < truth.size() && drafts.size() < static_cast<size_t>(count); ++p) {
      const double u = static_cast<double>(mix(request.sampling.seed * 1000003 + p) >> 11) * 0x1.0p-53;
      drafts.push_back(u < acceptance ? truth[p] : (truth[p] + 1) % vocab);
    }
    return drafts;
  };
  return draft;
}

std::string acceptance(const engine::EngineStats& stats) {
  std::string out;
  for (size_t k = 0; k < stats.drafts_verified.size(); ++k) {
    if (stats.drafts_verified[k] == 0) continue;
    out += fmt::format("{}{}: {}/{} ({:.2f})", out.empty() ? "" : ", ", k + 1, stats.drafts_accepted[k],
                       stats.drafts_verified[k],
                       static_cast<double>(stats.drafts_accepted[k]) / static_cast<double>(stats.drafts_verified[k]));
  }
  return out.empty() ? "none verified" : out;
}

}  // namespace

std::vector<std::vector<int32_t>> run_through_engine(model::Model& model, const EngineRun& run) {
  engine::DraftOptions draft = run.draft;
  if (draft.kind == engine::DraftKind::oracle) {
    if (run.oracle_acceptance < 0 || run.oracle_acceptance > 1)
      fail("--oracle-acceptance {}: must be 0 to 1", run.oracle_acceptance);
    // The continuation to replay, then plain decoding again, timed: the baseline of the same process, warm as the
    // drafted run will be (the first run paid the graphs' captures and the GEMMs' first calls).
    const Outcome truth = run_once(model, run, {});
    const Outcome plain = run_once(model, run, {});
    if (plain.ids != truth.ids) fail("duet run: two plain runs of the same prompts decoded other ids");
    size_t decoded = 0;
    for (const auto& stream : plain.ids) decoded += stream.empty() ? 0 : stream.size() - 1;
    std::fprintf(
        stderr, "%s\n",
        fmt::format("engine, plain (the oracle's baseline, warm): decode {} tokens in {:.1f} ms ({:.1f} tok/s) "
                    "over {} stream(s), {} steps",
                    decoded, plain.decode_s * 1e3,
                    plain.decode_s > 0 ? static_cast<double>(decoded) / plain.decode_s : 0.0, run.streams,
                    plain.stats.steps_total)
            .c_str());
    draft = oracle(run, truth.ids, static_cast<int32_t>(model.config().vocab_size));
  } else {
    for (int32_t pass = 0; pass < run.warmup; ++pass) run_once(model, run, draft);
  }
  model.restart_measurements();  // DUET_PROFILE's tables: the timed run's alone
  const Outcome out = run_once(model, run, draft);
  const engine::EngineStats& stats = out.stats;
  size_t decoded = 0;
  for (const auto& stream : out.ids) decoded += stream.empty() ? 0 : stream.size() - 1;
  int64_t accepted = 0;
  for (int64_t a : stats.drafts_accepted) accepted += a;
  const std::string kind = draft.kind == engine::DraftKind::oracle
                               ? fmt::format("oracle (acceptance {:.2f})", run.oracle_acceptance)
                               : engine::to_string(draft.kind);
  std::fprintf(
      stderr, "%s\n",
      fmt::format("engine, --draft {} --draft-tokens {}: decode {} tokens in {:.1f} ms ({:.1f} tok/s) over {} "
                  "stream(s), {} steps, {} launched ahead | verify pieces {}, tokens per verify piece {:.2f} | "
                  "acceptance by draft position: {}",
                  kind, draft.tokens, decoded, out.decode_s * 1e3,
                  out.decode_s > 0 ? static_cast<double>(decoded) / out.decode_s : 0.0, run.streams, stats.steps_total,
                  stats.steps_ahead_total, stats.verify_pieces_total,
                  stats.verify_pieces_total > 0 ? static_cast<double>(stats.verify_pieces_total + accepted) /
                                                      static_cast<double>(stats.verify_pieces_total)
                                                : 0.0,
                  acceptance(stats))
          .c_str());
  return out.ids;
}

}  // namespace duet::cli
