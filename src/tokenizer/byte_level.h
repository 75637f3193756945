#pragma once
// GPT-2's byte-level alphabet: every byte is shown as a printable character (space is "Ġ", newline "Ċ"),
// which is how byte-level BPE vocabularies spell their tokens. duet runs BPE on raw bytes and uses this
// mapping only at load time, to turn vocabulary strings back into the bytes they stand for.
#include <optional>
#include <string>
#include <string_view>

namespace duet::tokenizer {

// The character byte `b` is written as.
char32_t byte_to_char(unsigned char b);

// The bytes a byte-level token string stands for, or nullopt if it contains a character outside the
// alphabet (an added token such as "<|im_start|>" is all inside it; one with a space is not).
std::optional<std::string> byte_level_decode(std::string_view token);

// What HF's ByteLevel decoder makes of one token: its bytes, or its UTF-8 text when it is not
// byte-level (tokenizers falls back to the token's own bytes in that case).
std::string token_bytes(std::string_view token);

// The byte-level spelling of raw bytes.
std::string byte_level_encode(std::string_view bytes);

}  // namespace duet::tokenizer
