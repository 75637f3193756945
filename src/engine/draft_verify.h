#pragma once
// Speculative decoding: a decoding sequence's step carries its last generated token and K drafted tokens as K + 1 rows
// (a verify piece), and keeps the drafts its own draws confirm. Exactness rests on two things:
//
// 1. A verify row has the bits the same position's plain decode row would have. On the CPU backend every row of a
//    step is computed by the same arithmetic whatever piece or role it is in (the projections are per-row dot products
//    in a fixed order; attention reads its own sequence's K/V of positions 0..p in position order; the GDN conv reads
//    the inputs of the three positions before it, from the piece or from the conv history). The delta rule's chunked
//    form (backend/cpu/delta_rule.h; the CUDA kernel's comment in gdn_delta_rule.cu) keeps a sequence's state as S_b,
//    the state at the last multiple of 64, plus the current chunk's rows so far; a row's output is computed from S_b
//    and the earlier rows of its chunk by one formula whether they came in one piece, many, or one token at a time. So
//    row t of a verify piece, run on tokens that are all accepted, equals the decode row of that position.
// 2. Row t's draw is the draw plain decoding would make at that position, when drafts 0..t-1 were accepted: the seeded
//    draw is keyed by (seed, position), and the penalties count drafts 0..t-1 as generated (verify_specs). So the
//    sequence takes row 0's draw, then row t's while draft t-1 equals the draw before it (take_verified); a draft that
//    differs ends the step, and the rows after it, computed on the wrong token, are taken back: the GDN state is
//    rewound to the last kept row (backend::StateStorage::rewind), and K/V written past it are overwritten before
//    anything reads them.
// Stop tokens, stop strings, max_tokens and the grammar end a sequence inside a step exactly where plain decoding
// would: each token goes through Sequence::accept in order, and drafting never proposes past max_tokens. Structured
// outputs do not draft (their masks follow the grammar state token by token).
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"

namespace duet::engine {

// The draws of a verify piece's rows (the sequence's verify_tokens()): row t at position next_position() + t, with
// the penalties counting drafts before it as generated (SampleSpec::extra_generated, beside the counts of the
// sequence's slot), as plain decoding would count them once accepted. The specs view the sequence's verify tokens.
std::vector<backend::SampleSpec> verify_specs(const Sequence& sequence);

struct Verified {
  int32_t kept = 0;                    // rows kept: tokens taken into the sequence (its position advances by this many)
  int32_t compared = 0;                // drafts compared with a draw
  int32_t accepted = 0;                // of them, equal to it
  std::optional<FinishReason> reason;  // the sequence ended with its last token taken
};

// Takes the draws of a verify piece into the sequence in order, as Sequence::accept would one step at a time: row t's
// draw (draws[t]) is the token after the row's input; it goes on to row t + 1 while draft t equals that draw and the
// sequence has not ended. `unchecked` (tests only, a planted fault) goes on without comparing.
Verified take_verified(Sequence& sequence, std::span<const int32_t> drafts, std::span<const SampledToken> draws,
                       const std::function<bool(int32_t)>& is_stop_token, bool unchecked = false);

}  // namespace duet::engine
