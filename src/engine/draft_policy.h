#pragma once
// How many tokens the next step drafts (issue 20 item 5). Verifying K drafts costs K more rows in the step and K draft
// passes; it pays while the rows are nearly free (one stream: the step reads the weights once whatever its rows) and
// stops paying as the batch grows (at 64 streams the step is already bandwidth-efficient, and every draft row costs
// compute). So the policy measures, instead of modelling: per batch size (in powers of two) and per K, the time of a
// step's forward when it verifies K drafts a sequence and the time of drafting K tokens after it; and per draft
// position the rate at which drafts are accepted given that the ones before them were. It chooses the K with the most
// expected tokens per second:
//
//   tokens(K) = 1 + a_1 + a_1 a_2 + ... + a_1...a_K   (per sequence; a_k the acceptance of draft k)
//   seconds(K) = forward(K) + drafting(K)
//
// Every K of a batch size is tried before any is chosen, and one choice in kExploreEvery tries the K measured longest
// ago, so the choice follows the costs as they change. The choice never changes a token (verification is exact),
// only how many steps the tokens take. Engine thread only.
#include <array>
#include <cstdint>

namespace duet::engine {

class DraftPolicy {
 public:
  static constexpr int32_t kMostTokens = 4;
  static constexpr int32_t kBatchBuckets = 9;  // 1, 2, 3-4, 5-8, ..., 129 and more
  static constexpr int32_t kExploreEvery = 16;

  // Drafts of up to `most` tokens (1..kMostTokens) a step.
  explicit DraftPolicy(int32_t most);

  // K for the next step of `sequences` decoding sequences (0: decode plainly).
  int32_t choose(int32_t sequences);
  // The forward of a step of `sequences` decoding sequences that verified K = `verified` drafts each (no prefill rows
  // in it) took `seconds`.
  void note_forward(int32_t sequences, int32_t verified, double seconds);
  // Drafting `drafted` tokens for each of `sequences` sequences took `seconds`.
  void note_drafting(int32_t sequences, int32_t drafted, double seconds);
  // A verify piece compared `compared` drafts in order and accepted the first `accepted` of them.
  void note_verified(int32_t compared, int32_t accepted);

  // What the choice rests on, for tests and logs.
  double acceptance(int32_t k) const;  // a_k, k = 1..most (1 before any was compared)
  double expected_tokens(int32_t k) const;
  double step_seconds(int32_t sequences, int32_t k) const;  // forward + drafting as measured; 0 before both were

 private:
  static int32_t bucket_of(int32_t sequences);

  struct Measured {
    double seconds = 0;  // an exponential average
    int64_t steps = 0;
    int64_t last_step = 0;  // the policy's step count when it was last measured
  };
  using Table = std::array<std::array<Measured, kMostTokens + 1>, kBatchBuckets>;
  static void note(Measured& m, double seconds, int64_t step);

  int32_t most_;
  int64_t steps_ = 0;
  Table forward_{}, drafting_{};  // drafting_[b][0] stays unmeasured: no drafting costs nothing
  std::array<double, kMostTokens + 1> compared_{}, accepted_{};  // exponential counts per draft position
};

}  // namespace duet::engine
