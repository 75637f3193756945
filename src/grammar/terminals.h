#pragma once
// Added tokens a grammar writes as single tokens: the model's tool-call tags. Tokenizers keep them out of the byte
// vocabulary (a constrained document must never contain "<think>" or "<tool_call>" by accident), so inside a grammar
// each is spelled by one byte that UTF-8 text never contains (0xF8 and up): no ordinary token can spell it or a part
// of it, every grammar that writes text writes UTF-8, and the vocabulary maps the byte to the added token's id
// (Vocabulary::from_tokenizer). The sampler then draws the tag as the one token the model was trained to write.
#include <array>
#include <cstdint>
#include <string_view>

#include "grammar/expr.h"

namespace duet::grammar {

enum class Terminal : uint8_t { tool_call_open, tool_call_close };
inline constexpr std::array<std::string_view, 2> kTerminalText = {"<tool_call>", "</tool_call>"};

inline uint8_t terminal_byte(Terminal t) { return static_cast<uint8_t>(0xF8 + static_cast<uint8_t>(t)); }
inline Expr terminal(Terminal t) { return byte_of(terminal_byte(t)); }
// Bytes no UTF-8 text contains: a token holding one can never be part of a document.
inline bool never_in_utf8(uint8_t b) { return b == 0xC0 || b == 0xC1 || b >= 0xF5; }

}  // namespace duet::grammar
