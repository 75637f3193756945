#pragma once
// GDN snapshots taken inside a step (backend::StepSnapshot, issue 18), below the engine, shared by the backends' tests
// (tests/engine/step_snapshots_test.cc on the CPU, tests/cuda/step_snapshots_cuda_test.cc on the GPU): a snapshot the
// step writes at a block end inside its rows has the bytes of save_snapshot after a step cut there, for several block
// ends, for a piece that starts at 0 or later, with a partial last chunk after the snapshots; the step's rows are the
// same with or without them; and a prompt resumed from such an entry equals the same prompt computed fresh. Planted
// controls: a snapshot written one block early differs from the cut one, and resuming from it differs from fresh.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "prompt_cache_runs.h"

namespace duet::engine::testing {

// Positions [0, first) as one piece, then [first, end) as another asking for `snapshots`; the second's rows.
inline Rows run_with_snapshots(PieceRunner& runner, std::span<const int32_t> prompt, size_t first,
                               std::span<const backend::StepSnapshot> snapshots) {
  const int32_t slot = runner.open();
  if (first > 0) runner.run(model::Piece{.slot = slot, .tokens = prompt.first(first), .wants = model::RowOutput::none});
  const auto out =
      runner.run(model::Piece{.slot = slot, .tokens = prompt.subspan(first), .wants = kAll, .snapshots = snapshots});
  runner.close(slot);
  return {out[0].norm_rows, out[0].logits};
}

// The snapshot a step cut at `at` leaves: [0, first) and [first, at) as pieces, then save_snapshot into `snapshot`.
inline std::vector<std::byte> cut_snapshot(PieceRunner& runner, std::span<const int32_t> prompt, size_t first,
                                           size_t at, int32_t snapshot) {
  const int32_t slot = runner.open();
  if (first > 0) runner.run(model::Piece{.slot = slot, .tokens = prompt.first(first), .wants = model::RowOutput::none});
  runner.run(model::Piece{.slot = slot, .tokens = prompt.subspan(first, at - first), .wants = model::RowOutput::none});
  runner.storage().save_snapshot(slot, snapshot);
  runner.close(slot);
  return runner.storage().snapshot_bytes(snapshot);
}

inline void expect_snapshots_in_a_step_equal_cut_ones(model::Model& model) {
  PieceRunner runner(model, 2, 512, 0, /*snapshots=*/8);
  ASSERT_TRUE(runner.storage().snapshots_inside_steps());
  const std::vector<int32_t> prompt = prompt_of(230, 31, vocab_of(model));  // 38 rows past the last block end
  for (const size_t first : {size_t{0}, size_t{64}}) {
    std::vector<backend::StepSnapshot> wanted;
    for (int64_t at = static_cast<int64_t>(first) + 64; at <= 192; at += 64)
      wanted.push_back({.position = at, .snapshot = static_cast<int32_t>(wanted.size())});
    const Rows with = run_with_snapshots(runner, prompt, first, wanted);
    const Rows without = run_with_snapshots(runner, prompt, first, {});
    EXPECT_TRUE(same_bytes(with.norm_rows, without.norm_rows)) << "the snapshots changed the step's rows";
    EXPECT_TRUE(same_bytes(with.logits, without.logits));
    for (const backend::StepSnapshot& s : wanted) {
      const std::vector<std::byte> in_step = runner.storage().snapshot_bytes(s.snapshot);
      const std::vector<std::byte> cut = cut_snapshot(runner, prompt, first, static_cast<size_t>(s.position), 7);
      ASSERT_FALSE(cut.empty());
      EXPECT_TRUE(in_step == cut) << "snapshot at " << s.position << ", step from " << first;
    }
  }
  // A step that ends at the block end it snapshots (the step the cut path would have run).
  const std::vector<backend::StepSnapshot> at_end{{.position = 128, .snapshot = 0}};
  run_with_snapshots(runner, std::span(prompt).first(128), 64, at_end);
  EXPECT_TRUE(runner.storage().snapshot_bytes(0) == cut_snapshot(runner, prompt, 0, 128, 7));
  // The control: written one block early, it is not the state at the block end.
  const std::vector<backend::StepSnapshot> early{{.position = 128, .snapshot = 0}};
  run_with_snapshots(runner, prompt, 0, early);
  EXPECT_FALSE(runner.storage().snapshot_bytes(0) == cut_snapshot(runner, prompt, 0, 192, 7))
      << "a snapshot one block early went unnoticed";
}

// Refused before anything moves: off a block end, at the piece's start, past its end, out of order, unknown ids.
inline void expect_bad_snapshot_requests_refused(model::Model& model) {
  PieceRunner runner(model, 1, 512, 0, /*snapshots=*/2);
  const std::vector<int32_t> prompt = prompt_of(200, 32, vocab_of(model));
  const std::vector<std::vector<backend::StepSnapshot>> bad = {
      {{.position = 100, .snapshot = 0}},
      {{.position = 0, .snapshot = 0}},
      {{.position = 256, .snapshot = 0}},
      {{.position = 128, .snapshot = 0}, {.position = 64, .snapshot = 1}},
      {{.position = 64, .snapshot = 2}}};
  for (const auto& requests : bad) {
    const int32_t slot = runner.open();
    EXPECT_THROW(runner.run(model::Piece{
                     .slot = slot, .tokens = prompt, .wants = model::RowOutput::none, .snapshots = requests}),
                 model::PieceRefused);
    EXPECT_EQ(runner.position(slot), 0);
    runner.close(slot);
  }
}

// Every block end inside `prompt` kept from one step, as the engine does (StepSnapshots): reserved before, written by
// the step `shift` positions early (0; a planted fault otherwise), committed after.
inline void warm_in_one_step(PieceRunner& runner, PromptCache& cache, std::span<const int32_t> prompt,
                             int64_t shift = 0) {
  std::vector<backend::StepSnapshot> wanted;
  for (auto at = static_cast<size_t>(64 + shift); at < prompt.size(); at += 64) {
    const std::optional<int32_t> snapshot = cache.reserve(0, prompt.first(at));
    ASSERT_TRUE(snapshot);
    wanted.push_back({.position = static_cast<int64_t>(at) - shift, .snapshot = *snapshot});
  }
  const int32_t slot = runner.open();
  runner.run(model::Piece{.slot = slot, .tokens = prompt, .wants = model::RowOutput::none, .snapshots = wanted});
  for (const backend::StepSnapshot& s : wanted)
    EXPECT_TRUE(cache.commit(s.snapshot, 0, prompt.first(static_cast<size_t>(s.position + shift)), slot));
  runner.close(slot);
}

inline void expect_resumed_from_step_snapshots_equals_fresh(model::Model& model) {
  for (const int64_t shift : {int64_t{0}, int64_t{64}}) {
    PieceRunner runner(model, 2, 512, 0, /*snapshots=*/8);
    PromptCache cache(runner.blocks(), runner.storage(), 8, 64);
    const std::vector<int32_t> base = prompt_of(220, 33, vocab_of(model));
    warm_in_one_step(runner, cache, base, shift);  // entries at 128 and 192 (64 too, unless shifted)
    for (size_t blocks : {2, 3}) {
      const std::vector<int32_t> prompt =
          concat(std::span(base).first(blocks * 64),
                 prompt_of(29 + blocks, 40 + static_cast<uint32_t>(blocks), vocab_of(model)));
      const auto hit = cache.lookup(0, prompt);
      ASSERT_TRUE(hit) << blocks;
      ASSERT_EQ(hit->tokens(), static_cast<int64_t>(blocks * 64));
      const Rows resumed = resumed_rows(runner, hit->pages, hit->snapshot, prompt, /*neighbour=*/blocks == 3);
      const Rows fresh = fresh_rows(model, prompt, blocks * 64);
      if (shift == 0) {
        EXPECT_TRUE(same_bytes(resumed.norm_rows, fresh.norm_rows)) << blocks << " blocks resumed";
        EXPECT_TRUE(same_bytes(resumed.logits, fresh.logits)) << blocks << " blocks resumed";
      } else {
        EXPECT_FALSE(same_bytes(resumed.norm_rows, fresh.norm_rows)) << "the planted early snapshot went unnoticed";
      }
    }
    // Every sequence is closed: only the cache's references hold pages, three of them.
    EXPECT_EQ(runner.blocks().free_pages(), runner.blocks().pages() - 3);
  }
}

// A reserved snapshot given back (a step that failed) is free again, and nothing was kept.
inline void expect_released_reservations_to_be_free(model::Model& model) {
  PieceRunner runner(model, 1, 512, 0, /*snapshots=*/2);
  PromptCache cache(runner.blocks(), runner.storage(), 2, 64);
  const std::vector<int32_t> prompt = prompt_of(130, 34, vocab_of(model));
  const auto a = cache.reserve(0, std::span(prompt).first(64)), b = cache.reserve(0, std::span(prompt).first(128));
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(cache.reserve(0, std::span(prompt).first(64))) << "both snapshots are reserved";
  cache.release(*a), cache.release(*b);
  EXPECT_EQ(cache.stats().entries, 0);
  warm_in_one_step(runner, cache, prompt);
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_FALSE(cache.reserve(0, std::span(prompt).first(128))) << "cached already";
}

}  // namespace duet::engine::testing
