#pragma once
// The tokenizer's deterministic ~10 MB benchmark text (English, code, CJK, Thai, Arabic, Cyrillic, emoji,
// digits, whitespace runs): tokenizer_bench times it and hf_live_test compares it with HF tokenizers.
#include <cstddef>
#include <string>

namespace duet::tokenizer {

// Same bytes on every machine (a fixed LCG picks from fixed pools); stops at the first piece that reaches `bytes`.
std::string make_bench_text(size_t bytes);

// make_bench_text(10,000,000): 10,000,024 bytes, sha256
// b965b38e71bc071dbf636c8fdc8405bebd48f9876334852ddd4148939715139b.
const std::string& bench_text();

}  // namespace duet::tokenizer
