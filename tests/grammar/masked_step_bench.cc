// The host work a constrained decode step adds, per step of R rows (not a test; docs/benchmarks.md records its output):
//   grammar_masked_step_bench [ROWS...]   (default: 1 and 64 rows)
// R sequences walk the same small schema (the 9B-shape serving measurement's kind: an object with a string and an array
// of strings) on the 248,320-column synthetic Qwen3.5 vocabulary, one token a step, each restarting when its document
// is complete. Per step it times, on this thread:
//   mask into its own vector   each sequence's fill_mask into the vector it keeps (Sequence::prepare_mask before
//                              the overlap: resize, fill, its stop ids), R of them;
//   gather into the plan       the backend's copy of every row's mask into one vector (`masks.insert`), then
//                              the staging copy (`upload_.put`'s memcpy): two copies of R x 31 KB;
//   mask straight to staging   fill_mask writing each row's words at its place in the staging buffer (the overlap's
//                              path: no vector, no copy);
//   accept                     accept_token and must_end for each row's drawn token (Sequence::accept's grammar part).
// Thread CPU time besides the wall clock (a preempted thread does not accrue it): this VM is shared.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "corpus.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

using namespace duet;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int32_t kSyntheticWidth = 248320;  // the Qwen3.5 models' logit columns (7,760 mask words)
constexpr int kSteps = 200;

double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// Wall and CPU microseconds of one phase, summed over the steps.
struct Phase {
  const char* name;
  double wall = 0, cpu = 0;
  template <typename Work>
  void time(Work&& work) {
    const double c = thread_cpu_us();
    const auto t = Clock::now();
    work();
    wall += std::chrono::duration<double, std::micro>(Clock::now() - t).count();
    cpu += thread_cpu_us() - c;
  }
};

// One sequence: its matcher and the token it draws next (uniformly among the allowed, half the time among those that
// close a string, array or object, so documents end).
struct Walker {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::unique_ptr<grammar::Matcher> matcher;
  std::vector<uint32_t> own;  // the mask it keeps (the old path)
  std::mt19937 rng;
  void restart() { matcher = std::make_unique<grammar::Matcher>(grammar); }
  int32_t pick(std::span<const uint32_t> mask) {
    const auto& v = grammar->vocabulary();
    std::vector<int32_t> allowed, closing;
    for (size_t w = 0; w < mask.size(); ++w)
      for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
        const auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        const int32_t rank = v.rank_of(id);
        if (rank < 0) continue;
        allowed.push_back(id);
        if (v.bytes(rank).find_first_of("\"]}") != std::string::npos) closing.push_back(id);
      }
    if (allowed.empty()) return -1;
    const auto& pool = !closing.empty() && rng() % 2 == 0 ? closing : allowed;
    return pool[rng() % pool.size()];
  }
};

void run(const std::shared_ptr<const grammar::CompiledGrammar>& g, int rows) {
  const size_t words = static_cast<size_t>(g->vocabulary().words());
  const std::vector<int32_t> stop_ids = {248044, 248046};  // as the engine allows them where the document may end
  std::vector<Walker> walkers(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) {
    walkers[i].grammar = g;
    walkers[i].rng.seed(static_cast<uint32_t>(i + 1));
    walkers[i].restart();
  }
  std::vector<uint32_t> staging(static_cast<size_t>(rows) * words);  // the pinned upload buffer's stand-in
  std::vector<int32_t> drawn(static_cast<size_t>(rows));
  Phase own{"mask into its own vector"}, gather{"gather into the plan (2 copies)"}, direct{"mask straight to staging"},
      accept{"accept"};
  int64_t restarts = 0;
  for (int step = 0; step < kSteps; ++step) {
    own.time([&] {
      for (Walker& w : walkers) {
        w.own.resize(words);
        w.matcher->fill_mask(w.own);
        if (w.matcher->can_end())
          for (int32_t id : stop_ids)
            if (static_cast<size_t>(id) / 32 < words) grammar::set_bit(w.own, id);
      }
    });
    gather.time([&] {
      std::vector<uint32_t> masks;
      for (const Walker& w : walkers) masks.insert(masks.end(), w.own.begin(), w.own.end());
      std::memcpy(staging.data(), masks.data(), masks.size() * sizeof(uint32_t));
    });
    direct.time([&] {
      for (size_t i = 0; i < walkers.size(); ++i) {
        const std::span<uint32_t> row(staging.data() + i * words, words);
        walkers[i].matcher->fill_mask(row);
        if (walkers[i].matcher->can_end())
          for (int32_t id : stop_ids)
            if (static_cast<size_t>(id) / 32 < words) grammar::set_bit(row, id);
      }
    });
    for (size_t i = 0; i < walkers.size(); ++i) drawn[i] = walkers[i].pick(walkers[i].own);  // not timed
    accept.time([&] {
      for (size_t i = 0; i < walkers.size(); ++i)
        if (drawn[i] >= 0 && walkers[i].matcher->accept_token(drawn[i])) (void)walkers[i].matcher->must_end();
    });
    for (size_t i = 0; i < walkers.size(); ++i)
      if (drawn[i] < 0 || walkers[i].matcher->must_end() || drawn[i] >= 248044) {
        walkers[i].restart();
        ++restarts;
      }
  }
  std::printf("  %d rows, %d steps (%lld documents restarted): per step, wall / thread CPU\n", rows, kSteps,
              static_cast<long long>(restarts));
  for (const Phase* p : {&own, &gather, &direct, &accept})
    std::printf("    %-34s %8.1f us / %8.1f us  (%6.2f us a row)\n", p->name, p->wall / kSteps, p->cpu / kSteps,
                p->cpu / kSteps / rows);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> row_counts;
  for (int i = 1; i < argc; ++i) row_counts.push_back(std::atoi(argv[i]));
  if (row_counts.empty()) row_counts = {1, 64};
  const std::string dir = duet::testing::kTestsDir + "/fixtures/tokenizer/qwen35-synthetic";
  const auto tok = tokenizer::Tokenizer::load_dir(dir);
  auto vocab = grammar::Vocabulary::from_tokenizer(*tok, std::max(kSyntheticWidth, tok->vocab_size()));
  const auto schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{"title":{"type":"string"},
      "notes":{"type":"array","items":{"type":"string"}}},"required":["title","notes"],"additionalProperties":false})");
  grammar::GrammarCache cache(vocab);
  const auto g = cache.for_schema(schema, {});
  g->precompute_all();  // a warm server's grammar cache
  std::printf("vocabulary %s: %d tokens, %d mask words\n", dir.c_str(), vocab->tokens(), vocab->words());
  for (int rows : row_counts) run(g, rows);
}
