#include "bench_text.h"

#include <cstdint>
#include <vector>

namespace duet::tokenizer {

std::string make_bench_text(size_t bytes) {
  // clang-format off
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
  // clang-format on
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

const std::string& bench_text() {
  static const std::string t = make_bench_text(10 * 1000 * 1000);
  return t;
}

}  // namespace duet::tokenizer
