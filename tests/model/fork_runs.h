#pragma once
// A sequence forked mid-prompt (engine::PieceRunner::fork: full pages shared, the page still filling and the GDN
// state copied), shared by the fork tests of every backend: the original prefills the first `cut` ids, a second
// sequence becomes its fork, then both run the rest of the prompt (one prefill
// piece) and a few decode tokens side by side in the same steps, every row's output collected for each.
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "model/model.h"
#include "piece_runs.h"

namespace duet::testing {

struct ForkedRows {
  Rows original, fork;
  int64_t original_pages = 0, fork_pages = 0;  // KV pages each held right after the copy
};

inline void append_rows(Rows& rows, const model::PieceResult& out) {
  rows.norm_rows.insert(rows.norm_rows.end(), out.norm_rows.begin(), out.norm_rows.end());
  rows.logits.insert(rows.logits.end(), out.logits.begin(), out.logits.end());
}

// The fork copies the original, or (a control, copy_an_empty_state) a state that holds nothing.
inline ForkedRows run_forked(model::Model& model, std::span<const int32_t> ids, size_t cut,
                             std::span<const int32_t> decode, bool copy_an_empty_state = false) {
  const auto capacity = static_cast<int32_t>(ids.size() + decode.size());
  engine::PieceRunner runner(model, 3, capacity);
  const int32_t original = runner.open(), fork = runner.open(), empty = runner.open();
  constexpr auto kRows = model::RowOutput::all_logits | model::RowOutput::norm_rows;
  if (cut > 0) runner.run(model::Piece{.slot = original, .tokens = ids.first(cut), .wants = model::RowOutput::none});
  runner.fork(copy_an_empty_state ? empty : original, fork);
  ForkedRows out;
  out.original_pages = static_cast<int64_t>(runner.blocks().table(original).size());
  out.fork_pages = static_cast<int64_t>(runner.blocks().table(fork).size());
  const model::Piece rest[2] = {{.slot = original, .tokens = ids.subspan(cut), .wants = kRows},
                                {.slot = fork, .tokens = ids.subspan(cut), .wants = kRows}};
  auto results = runner.run(rest);
  append_rows(out.original, results[0]), append_rows(out.fork, results[1]);
  for (size_t t = 0; t < decode.size(); ++t) {
    const model::Piece step[2] = {
        {.slot = original, .tokens = decode.subspan(t, 1), .wants = kRows, .role = backend::RowRole::decode},
        {.slot = fork, .tokens = decode.subspan(t, 1), .wants = kRows, .role = backend::RowRole::decode}};
    auto results = runner.run(step);
    append_rows(out.original, results[0]), append_rows(out.fork, results[1]);
  }
  return out;
}

// A prompt of `length` ids spread over the vocabulary.
inline std::vector<int32_t> fork_prompt(const model::Model& model, size_t length) {
  std::vector<int32_t> ids(length);
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  for (size_t i = 0; i < length; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return ids;
}

// What every backend must keep: forks taken inside a delta-rule chunk (100), on a chunk boundary (64) and after one
// token compute the original's rows bit for bit, with as many pages (the full ones shared); the control (a copy of an
// empty state) differs, so the comparison can fail.
inline void expect_forks_equal_originals(model::Model& model) {
  const std::vector<int32_t> ids = fork_prompt(model, 150), decode = {5, 9, 2};
  for (size_t cut : {100, 64, 1}) {
    const ForkedRows rows = run_forked(model, ids, cut, decode);
    EXPECT_EQ(rows.fork_pages, rows.original_pages) << "cut " << cut;
    ASSERT_FALSE(rows.original.logits.empty());
    EXPECT_TRUE(same_bytes(rows.fork.logits, rows.original.logits)) << "cut " << cut;
    EXPECT_TRUE(same_bytes(rows.fork.norm_rows, rows.original.norm_rows)) << "cut " << cut;
  }
  const ForkedRows control = run_forked(model, ids, 100, decode, /*copy_an_empty_state=*/true);
  EXPECT_EQ(control.fork_pages, 0);
  EXPECT_FALSE(same_bytes(control.fork.logits, control.original.logits)) << "the control must differ";
}

}  // namespace duet::testing
