#pragma once
// UTF-8 helpers with the exact semantics Hugging Face tokenizers (Rust) has: validation as Rust's str, and
// lossy decoding as String::from_utf8_lossy (one U+FFFD per maximal invalid subpart, Unicode's recommended
// practice), so decoded text matches byte for byte.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace duet::tokenizer {

// Length of the valid UTF-8 character starting at s[i], or 0 when the bytes there are not one. A character
// cut off by the end of `s` counts as invalid here; `incomplete_tail` tells the two apart.
size_t utf8_char_len(std::string_view s, size_t i);

// Index of the first byte that is not part of valid UTF-8, or s.size() when all of `s` is valid.
size_t utf8_invalid_at(std::string_view s);

// Decodes the (valid) character at s[i] and advances i past it.
char32_t utf8_next(std::string_view s, size_t& i);

void utf8_append(std::string& out, char32_t cp);

// Appends `bytes` to `out` with every maximal invalid subpart replaced by U+FFFD (String::from_utf8_lossy).
void utf8_lossy_append(std::string& out, std::string_view bytes);

// How many bytes at the end of `s` are a valid but unfinished character (a prefix that more bytes could
// complete): 0..3. Streaming decode holds these back.
size_t utf8_incomplete_tail(std::string_view s);

}  // namespace duet::tokenizer
