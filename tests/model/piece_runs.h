#pragma once
// Test helpers shared by the row-invariance tests of every backend: a prompt run through one sequence in prefill
// pieces of given sizes, every row's output collected, and a byte-for-byte comparison.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::testing {

struct Rows {
  std::vector<float> norm_rows;  // [tokens, hidden]
  std::vector<float> logits;     // [tokens, vocab]
};

// Runs `ids` through one sequence in pieces of the given sizes (cycled), collecting every row.
inline Rows run_in_pieces(model::Model& model, std::span<const int32_t> ids, const std::vector<size_t>& sizes) {
  engine::PieceRunner runner(model, 1, static_cast<int32_t>(ids.size()));
  const int32_t slot = runner.open();
  Rows rows;
  for (size_t i = 0, done = 0; done < ids.size(); ++i) {
    const size_t n = std::min(sizes[i % sizes.size()], ids.size() - done);
    auto out = runner.run(model::Piece{.slot = slot,
                                       .tokens = ids.subspan(done, n),
                                       .wants = model::RowOutput::all_logits | model::RowOutput::norm_rows});
    rows.norm_rows.insert(rows.norm_rows.end(), out[0].norm_rows.begin(), out[0].norm_rows.end());
    rows.logits.insert(rows.logits.end(), out[0].logits.begin(), out[0].logits.end());
    done += n;
  }
  return rows;
}

inline bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace duet::testing
