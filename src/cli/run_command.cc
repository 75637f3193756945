// `duet run [MODEL] --prompt-ids 1,2,3 --max-tokens N [--chunk C] [--streams S]`: greedy continuation of a prompt
// given as token ids, on the backend named by --backend (default: the GPU when there is one), with timings. The
// continuation goes to stdout (one line of ids), timings to stderr. With --streams S the prompt runs as S sequences
// decoded together, one row each per step (the batched decode step a server runs at S streams, without HTTP); every
// stream must give the same ids (row invariance), and a difference is an error. With --mtp-agreement, also the share
// of the continuation the checkpoint's MTP layer would have drafted right (cli/mtp_agreement.h), on stderr. With
// --draft KIND (none too), the streams run through the engine instead, drafting as asked (cli/run_engine.h). The timed
// pass follows --warmup untimed ones (default 1; the engine's too), so the figures are a warm server's, not a first
// step's.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/draft_flags.h"
#include "cli/mtp_agreement.h"
#include "cli/run_engine.h"
#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::cli {

namespace {

struct RunOptions {
  std::string model_dir;
  std::string prompt_ids = "1,2,3";
  int max_tokens = 16;
  int chunk = 0;  // prefill piece size; 0: the whole prompt in one piece
  bool ignore_eos = false;
  int streams = 1;
  std::string backend = "auto";
  bool mtp_agreement = false;
  bool through_engine = false;  // --draft given
  DraftFlags draft;
  float temperature = 0.0f;
  int warmup = 1;  // untimed passes before the timed one
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != token.size() || value < 0 || value > INT32_MAX)
      fail("--prompt-ids: \"{}\" is not a token id (expected non-negative integers separated by commas)", token);
    ids.push_back(static_cast<int32_t>(value));
    token.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ') {
      flush();
    } else {
      token.push_back(c);
    }
  }
  flush();
  if (ids.empty()) fail("--prompt-ids: no token ids given");
  return ids;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// One greedy continuation of `prompt` on `streams` fresh slots of `runner` (closed again at the end), timed: the
// prefill (every stream's piece of each chunk in one step) and the decode steps after it.
struct GreedyRun {
  std::vector<std::vector<int32_t>> generated;
  double prefill_s = 0, decode_s = 0;
};
GreedyRun greedy_run(engine::PieceRunner& runner, const std::vector<int32_t>& prompt, size_t chunk, int streams,
                     int max_tokens, const std::vector<int64_t>* eos) {
  GreedyRun out;
  std::vector<int32_t> slots;
  for (int i = 0; i < streams; ++i) slots.push_back(runner.open());
  auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>>& generated = out.generated;
  generated.resize(streams);
  for (size_t done = 0; done < prompt.size(); done += chunk) {  // every stream's piece of the prompt in one step
    const size_t n = std::min(chunk, prompt.size() - done);
    std::vector<model::Piece> pieces;
    for (int i = 0; i < streams; ++i)
      pieces.push_back(model::Piece{.slot = slots[i],
                                    .tokens = std::span<const int32_t>(prompt).subspan(done, n),
                                    .wants = model::RowOutput::last_logits});
    const auto results = runner.run(pieces);
    if (done + n == prompt.size())
      for (int i = 0; i < streams; ++i) generated[i].push_back(argmax(results[i].logits));
  }
  out.prefill_s = seconds_since(start);

  // Decode steps as the server runs them: the backend picks the token (greedy: the first maximum, as argmax above),
  // so only the id comes back and a GPU replays the step's graph, instead of copying every logit to the host.
  backend::SampleSpec greedy;
  greedy.temperature = 0.0f;
  std::vector<backend::SampleSpec> specs(streams, greedy);
  std::vector<model::Piece> pieces(streams);
  start = std::chrono::steady_clock::now();
  while (static_cast<int>(generated[0].size()) < max_tokens) {
    if (eos != nullptr && std::find(eos->begin(), eos->end(), generated[0].back()) != eos->end()) break;
    for (int i = 0; i < streams; ++i) {
      specs[i].position = static_cast<int64_t>(prompt.size() + generated[i].size() - 1);
      pieces[i] = model::Piece{.slot = slots[i],
                               .tokens = {&generated[i].back(), 1},
                               .wants = model::RowOutput::sampled,
                               .role = backend::RowRole::decode,
                               .sample = &specs[i]};
    }
    const auto results = runner.run(pieces);
    for (int i = 0; i < streams; ++i) generated[i].push_back(results[i].sampled.id);
  }
  out.decode_s = seconds_since(start);
  for (int32_t slot : slots) runner.close(slot);
  return out;
}

void run(const RunOptions& options) {
  const std::vector<int32_t> prompt = parse_ids(options.prompt_ids);
  if (options.max_tokens < 1) fail("--max-tokens: {} must be at least 1", options.max_tokens);
  if (options.chunk < 0) fail("--chunk: {} must be positive (or 0 for the whole prompt)", options.chunk);
  if (options.warmup < 0 || options.warmup > 100) fail("--warmup: {} must be in 0..100", options.warmup);
  if (options.streams < 1 || options.streams > 1024) fail("--streams: {} must be in 1..1024", options.streams);
  const std::string model_dir = options.model_dir.empty() ? default_model_dir() : options.model_dir;
  const engine::DraftOptions draft = draft_options(options.draft);
  if (options.temperature != 0.0f && !options.through_engine)
    fail("--temperature: only with --draft (the engine's seeded sampling)");

  auto start = std::chrono::steady_clock::now();
  auto model = model::Model::load(model_dir, options.backend);
  if (options.mtp_agreement && !model->has_mtp())
    fail("--mtp-agreement: {} has no MTP layer (no mtp.* tensors, or none declared in its config)", model_dir);
  const double load_s = seconds_since(start);
  const auto& config = model->config();
  const auto& eos = config.eos_token_ids;
  if (options.through_engine) {
    const auto ids = run_through_engine(*model, {.prompt = prompt,
                                                 .max_tokens = options.max_tokens,
                                                 .streams = options.streams,
                                                 .ignore_eos = options.ignore_eos,
                                                 .temperature = options.temperature,
                                                 .draft = draft,
                                                 .oracle_acceptance = options.draft.oracle_acceptance,
                                                 .warmup = options.warmup});
    for (size_t i = 1; i < ids.size(); ++i)
      if (options.temperature == 0.0f && ids[i] != ids[0])
        fail("stream {} decoded other ids than stream 0 from the same prompt: the rows are not independent", i);
    std::printf("%s\n", fmt::format("{}", fmt::join(ids[0], ",")).c_str());
    return;
  }

  const int streams = options.streams;
  engine::PieceRunner runner(*model, streams, static_cast<int32_t>(prompt.size()) + options.max_tokens);
  const size_t chunk = options.chunk == 0 ? prompt.size() : static_cast<size_t>(options.chunk);
  GreedyRun timed;
  for (int pass = 0; pass <= options.warmup; ++pass) {
    // Warm-up passes (untimed) pay what only a first step pays (kernel modules loaded, GEMM plans chosen, buffers
    // grown, decode graphs captured), as a server has paid it before its first request; then fresh slots again, and
    // the backend's measurements (DUET_PROFILE) start over, so that they are the timed pass's alone.
    if (pass > 0 && pass == options.warmup) model->restart_measurements();
    timed = greedy_run(runner, prompt, chunk, streams, options.max_tokens, options.ignore_eos ? nullptr : &eos);
  }
  const std::vector<std::vector<int32_t>>& generated = timed.generated;
  const double prefill_s = timed.prefill_s, decode_s = timed.decode_s;
  const size_t decoded = generated[0].size() - 1;  // the first token came from the prefill
  for (int i = 1; i < streams; ++i)
    if (generated[i] != generated[0])
      fail("stream {} decoded other ids than stream 0 from the same prompt: the rows are not independent", i);

  std::printf("%s\n", fmt::format("{}", fmt::join(generated[0], ",")).c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n",
               fmt::format("model {}: load {:.1f} ms | prefill {} tokens in {:.1f} ms ({:.0f} tok/s, chunk {}) | "
                           "decode {} tokens in {:.1f} ms ({:.0f} tok/s){}{}",
                           model_dir, load_s * 1e3, prompt.size() * streams, prefill_s * 1e3,
                           prompt.size() * streams / prefill_s, chunk, decoded * streams, decode_s * 1e3,
                           decoded > 0 ? decoded * streams / decode_s : 0.0,
                           streams > 1 ? fmt::format(" over {} streams, all alike", streams) : std::string(),
                           options.warmup > 0 ? fmt::format(" | after {} warm-up pass(es)", options.warmup)
                                              : std::string(" | cold: no warm-up pass"))
                   .c_str());
  if (options.mtp_agreement) {
    std::vector<int32_t> sequence = prompt;
    sequence.insert(sequence.end(), generated[0].begin(), generated[0].end());
    const MtpAgreement a = mtp_agreement(*model, sequence, prompt.size());
    std::fprintf(stderr, "%s\n",
                 fmt::format("MTP top-1 agreement with the greedy token after next: {} of {} ({:.2f})", a.agreed,
                             a.rows, a.rows > 0 ? static_cast<double>(a.agreed) / static_cast<double>(a.rows) : 0.0)
                     .c_str());
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  auto* run_cmd = app.add_subcommand("run", "Greedy continuation of a prompt (token ids) on a model, with timings");
  run_cmd->add_option("model", options->model_dir, "Model folder (config.json + safetensors); default: the demo model");
  run_cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, comma-separated")->capture_default_str();
  run_cmd->add_option("--max-tokens", options->max_tokens, "Tokens to generate")->capture_default_str();
  run_cmd->add_option("--chunk", options->chunk, "Prefill piece size in tokens (0: the whole prompt at once)")
      ->capture_default_str();
  run_cmd->add_option("--backend", options->backend, "cpu, cuda, or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  run_cmd
      ->add_option("--warmup", options->warmup,
                   "Untimed passes of the same prefill and decode before the timed one (0: time the first, cold)")
      ->capture_default_str();
  run_cmd->add_flag("--ignore-eos", options->ignore_eos, "Keep generating past the end-of-sequence token");
  run_cmd
      ->add_option("--streams", options->streams,
                   "Decode the prompt as this many sequences at once (one row each per step; all must agree)")
      ->capture_default_str();
  run_cmd->add_flag("--mtp-agreement", options->mtp_agreement,
                    "Also report how often the MTP layer's top-1 equals the greedy token after next (the acceptance "
                    "proxy of drafting one token)");
  add_draft_flags(*run_cmd, options->draft, true);
  run_cmd
      ->add_option("--temperature", options->temperature,
                   "With --draft: seeded sampling at this temperature (stream i seeds 1 + i); 0: greedy")
      ->capture_default_str();
  run_cmd->callback([options, run_cmd] {
    options->through_engine = run_cmd->count("--draft") > 0;
    run(*options);
  });
}

}  // namespace duet::cli
