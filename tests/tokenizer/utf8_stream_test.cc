// UTF-8 repair and streaming, against the rules of Rust's String::from_utf8_lossy (what tokenizers' decode
// uses): one U+FFFD per maximal invalid subpart. And the NFC shortcut's table against utf8proc's own data.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace duet::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string lossy(std::string_view s) {
  std::string out;
  utf8_lossy_append(out, s);
  return out;
}

TEST(Utf8, LossyMatchesMaximalSubparts) {
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("\x80\xBFx"), kFffd + kFffd + "x");       // stray continuation bytes, one each
  EXPECT_EQ(lossy("\xF0\x9F\x98"), kFffd);                  // a truncated 4-byte character: one subpart
  EXPECT_EQ(lossy("\xE0\x80"), kFffd + kFffd);              // E0 needs A0..BF next: two subparts
  EXPECT_EQ(lossy("\xC0\xAF"), kFffd + kFffd);              // overlong lead byte
  EXPECT_EQ(lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(lossy("a\xF4\x90\x80\x80z"), "a" + kFffd + kFffd + kFffd + kFffd + "z");  // above U+10FFFF
  EXPECT_EQ(lossy("\xE2\x82\xAC\xE2\x82"), "\xE2\x82\xAC" + kFffd);
  EXPECT_EQ(utf8_incomplete_tail("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xE2\x28"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
}

TEST(Utf8, ByteLevelAlphabet) {
  EXPECT_EQ(byte_level_encode(" \n"), "\xC4\xA0\xC4\x8A");  // "ĠĊ"
  EXPECT_EQ(byte_level_decode("\xC4\xA0hi"), std::optional<std::string>(" hi"));
  EXPECT_EQ(byte_level_decode("a b"), std::nullopt);  // a raw space is not in the alphabet
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, char(b));
    EXPECT_EQ(byte_level_decode(byte_level_encode(one)), std::optional<std::string>(one));
  }
}

// A tokenizer whose ids are bytes, to push arbitrary byte sequences through StreamDecoder.
class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer() {
    for (int b = 0; b < 256; ++b) bytes_[b] = std::string(1, char(b));
  }
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s += bytes_[id];
    return lossy(s);
  }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  bool is_special(int32_t id) const override { return id == 0; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return empty_; }
  const std::string* token_bytes(int32_t id) const override { return id >= 0 && id < 256 ? &bytes_[id] : nullptr; }

 private:
  std::string bytes_[256];
  std::string empty_;
};

std::vector<std::string> stream(const std::string& bytes, bool skip = false) {
  ByteTokenizer tok;
  StreamDecoder d(tok, skip);
  std::vector<std::string> pieces;
  for (unsigned char b : bytes) pieces.push_back(d.push(b));
  pieces.push_back(d.finish());
  return pieces;
}

TEST(StreamDecoder, HoldsBackUnfinishedCharacters) {
  EXPECT_EQ(stream("\xF0\x9F\x99\x82!"), (std::vector<std::string>{"", "", "", "\xF0\x9F\x99\x82", "!", ""}));
  EXPECT_EQ(stream("\xF0"
                   "a"),
            (std::vector<std::string>{"", kFffd + "a", ""}));
  EXPECT_EQ(stream("a\xE2\x82"), (std::vector<std::string>{"a", "", "", kFffd}));  // finish() flushes the rest
  EXPECT_EQ(stream(std::string("a\0b", 3), /*skip=*/true), (std::vector<std::string>{"a", "", "b", ""}));
}

TEST(StreamDecoder, EqualsOneShotOnEveryByteSplit) {
  // All 2- and 3-byte strings over an alphabet of interesting bytes, streamed byte by byte.
  const unsigned char alphabet[] = {0x41, 0x80, 0xBF, 0xC2, 0xE0, 0xE2, 0xED, 0xF0, 0xF4, 0x9F, 0xA0, 0xFF};
  ByteTokenizer tok;
  for (unsigned char a : alphabet)
    for (unsigned char b : alphabet)
      for (unsigned char c : alphabet) {
        const std::string s{char(a), char(b), char(c)};
        std::string joined;
        for (const auto& p : stream(s)) joined += p;
        EXPECT_EQ(joined, lossy(s));
      }
}

TEST(Normalizer, InertTableAgreesWithUtf8proc) {
  // No inert code point may change under NFC, nor be the second half of a canonical composition.
  for (char32_t cp = 1; cp <= 0x10FFFF; ++cp) {  // utf8proc_NFC takes C strings: no U+0000
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    utf8proc_int32_t decomposed[4];
    int last_boundclass = 0;
    const auto n =
        utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), decomposed, 4, UTF8PROC_DECOMPOSE, &last_boundclass);
    if (n == 2) {
      // cp = first + second canonically; if NFC recomposes them, `second` composes with what precedes it.
      std::string pair;
      utf8_append(pair, char32_t(decomposed[0]));
      utf8_append(pair, char32_t(decomposed[1]));
      std::string scratch;
      const std::string_view nfc = Normalizer(Normalizer::Kind::kNfc).apply(pair, scratch);
      std::string single;
      utf8_append(single, cp);
      if (nfc == single) {
        EXPECT_FALSE(nfc_inert(char32_t(decomposed[1]))) << std::hex << decomposed[1];
      }
    }
    if (nfc_inert(cp)) {
      std::string s;
      utf8_append(s, cp);
      utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
      ASSERT_NE(out, nullptr);
      EXPECT_EQ(std::string(reinterpret_cast<char*>(out)), s) << std::hex << uint32_t(cp);
      free(out);
    }
  }
}

TEST(Normalizer, ComposesAcrossTheFastPath) {
  std::string scratch;
  const Normalizer nfc(Normalizer::Kind::kNfc);
  EXPECT_EQ(nfc.apply("e\xCC\x81", scratch), "\xC3\xA9");                     // e + combining acute -> é
  EXPECT_EQ(nfc.apply("\xE1\x84\x80\xE1\x85\xA1", scratch), "\xEA\xB0\x80");  // Hangul L + V -> 가
  EXPECT_EQ(nfc.apply("plain ascii", scratch), "plain ascii");
}

}  // namespace
}  // namespace duet::tokenizer
