#include "cli/run_engine.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <variant>

#include "base/error.h"

namespace duet::cli {

namespace {

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
  engine::EngineOptions options;
  options.parallel = run.streams;
  options.context = static_cast<int32_t>(run.prompt.size()) + run.max_tokens;
  options.draft = run.draft;
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
  std::vector<std::vector<int32_t>> ids(handles.size());
  double first_token_s = 0;  // the latest stream's first token: decoding is timed from there
  for (size_t i = 0; i < handles.size(); ++i)
    for (;;) {
      const std::optional<engine::Event> event = handles[i]->next(std::chrono::milliseconds(600000));
      if (!event) fail("duet run: no event from the engine in 10 minutes");
      if (const auto* token = std::get_if<engine::TokenEvent>(&*event)) {
        ids[i].push_back(token->id);
        continue;
      }
      const auto& finished = std::get<engine::FinishedEvent>(*event);
      if (finished.reason == engine::FinishReason::error) fail("duet run: {}", finished.error);
      if (finished.matched_stop_token) ids[i].push_back(*finished.matched_stop_token);
      first_token_s = std::max(first_token_s, finished.time_to_first_token_s);
      break;
    }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const engine::EngineStats stats = engine.stats();
  size_t decoded = 0;
  for (const auto& stream : ids) decoded += stream.empty() ? 0 : stream.size() - 1;
  const double decode_s = total_s - first_token_s;
  int64_t accepted = 0;
  for (int64_t a : stats.drafts_accepted) accepted += a;
  std::fprintf(stderr, "%s\n",
               fmt::format("engine, --draft {} --draft-tokens {}: decode {} tokens in {:.1f} ms ({:.1f} tok/s) over {} "
                           "stream(s), {} steps | verify pieces {}, tokens per verify piece {:.2f} | acceptance by "
                           "draft position: {}",
                           engine::to_string(run.draft.kind), run.draft.tokens, decoded, decode_s * 1e3,
                           decode_s > 0 ? static_cast<double>(decoded) / decode_s : 0.0, run.streams, stats.steps_total,
                           stats.verify_pieces_total,
                           stats.verify_pieces_total > 0 ? static_cast<double>(stats.verify_pieces_total + accepted) /
                                                               static_cast<double>(stats.verify_pieces_total)
                                                         : 0.0,
                           acceptance(stats))
                   .c_str());
  return ids;
}

}  // namespace duet::cli
