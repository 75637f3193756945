// Verify rows taken back (backend::StateStorage::rewind; speculative decoding, engine/draft_verify.h) on the real tiny
// model: a sequence that runs 5 tokens as one rewindable piece and keeps m of them continues exactly as one that
// decoded those m tokens one at a time, every later row bit for bit, whether the kept rows end inside a chunk, at the
// multiple of 64 where the piece folded its chunk, or before it.
#include <gtest/gtest.h>

#include <random>

#include "../tests_dir.h"
#include "engine/piece_runner.h"
#include "model/model.h"
#include "piece_runs.h"

namespace duet {
namespace {

const std::string kTinyDir = testing::tests_dir() + "/fixtures/models/tiny-text";

class Rewind : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = model::Model::load(kTinyDir).release(); }
  static void TearDownTestSuite() { delete model_; }

  static std::vector<int32_t> ids(size_t count, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(model_->config().vocab_size) - 1);
    std::vector<int32_t> out(count);
    for (int32_t& v : out) v = id(rng);
    return out;
  }

  // The logits of every row of `continuation` after `prompt`: decoded one token at a time, or first as one rewindable
  // piece of `verify` rows of which `keep` stay (the rest taken back), then the rest one at a time. With `rewind`
  // false (a planted fault) the rows are not taken back: only the position moves.
  static std::vector<float> continue_after(std::span<const int32_t> prompt, std::span<const int32_t> continuation,
                                           int verify, int keep, bool rewind = true) {
    engine::PieceRunner runner(*model_, 1, static_cast<int32_t>(prompt.size() + continuation.size()));
    const int32_t slot = runner.open();
    runner.run(model::Piece{.slot = slot, .tokens = prompt, .wants = model::RowOutput::none});
    std::vector<float> logits;
    size_t done = 0;
    if (verify > 0) {
      auto out = runner.run(model::Piece{.slot = slot,
                                         .tokens = continuation.first(static_cast<size_t>(verify)),
                                         .wants = model::RowOutput::all_logits,
                                         .role = backend::RowRole::decode,
                                         .rewindable = true});
      const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
      logits.assign(out[0].logits.begin(), out[0].logits.begin() + static_cast<std::ptrdiff_t>(keep * vocab));
      const int64_t position = static_cast<int64_t>(prompt.size()) + keep;
      if (rewind) {
        runner.rewind(slot, position);
      } else {
        runner.blocks().advance(slot, position - runner.position(slot));
      }
      done = static_cast<size_t>(keep);
    }
    for (; done < continuation.size(); ++done) {
      auto out = runner.run(model::Piece{.slot = slot,
                                         .tokens = continuation.subspan(done, 1),
                                         .wants = model::RowOutput::last_logits,
                                         .role = backend::RowRole::decode});
      logits.insert(logits.end(), out[0].logits.begin(), out[0].logits.end());
    }
    return logits;
  }

  static inline model::Model* model_ = nullptr;
};

TEST_F(Rewind, KeptRowsContinueAsPlainDecoding) {
  ASSERT_NE(model_, nullptr) << kTinyDir;
  const std::vector<int32_t> continuation = ids(9, 7);
  // Prompt lengths put the 5 verify rows inside a chunk (10), ending at its last row (59), and across the fold at 64
  // at every offset (60 to 63).
  for (size_t length : {10, 59, 60, 61, 62, 63, 64}) {
    const std::vector<int32_t> prompt = ids(length, static_cast<uint32_t>(length));
    const std::vector<float> plain = continue_after(prompt, continuation, 0, 0);
    for (int keep = 1; keep <= 5; ++keep)
      EXPECT_TRUE(testing::same_bytes(continue_after(prompt, continuation, 5, keep), plain))
          << "prompt " << length << ", kept " << keep << " of 5 verify rows";
  }
}

// The planted control: rows left in the state (the position alone moved back) change what follows.
TEST_F(Rewind, RowsNotTakenBackAreCaught) {
  ASSERT_NE(model_, nullptr) << kTinyDir;
  const std::vector<int32_t> continuation = ids(9, 7);
  for (size_t length : {10, 62}) {
    const std::vector<int32_t> prompt = ids(length, static_cast<uint32_t>(length));
    EXPECT_FALSE(testing::same_bytes(continue_after(prompt, continuation, 5, 2, false),
                                     continue_after(prompt, continuation, 0, 0)))
        << "prompt " << length;
  }
}

}  // namespace
}  // namespace duet
