// The CPU backend's math pieces against straightforward reference loops: the chunked delta rule against the
// per-token one (and its own invariance to how rows arrive), the matmul against a double-precision loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_state.h"
#include "backend/cpu/delta_rule.h"
#include "backend/cpu/matmul.h"
#include "base/bf16.h"
#include "base/error.h"

namespace duet::backend::cpu {
namespace {

struct Inputs {
  int64_t rows, kd, vd;
  std::vector<float> q, k, v, g, beta;
};

void normalize(float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(s + 1e-6));
}

Inputs random_inputs(int64_t rows, int64_t kd, int64_t vd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Inputs in{rows, kd, vd, {}, {}, {}, {}, {}};
  in.q.resize(rows * kd), in.k.resize(rows * kd), in.v.resize(rows * vd), in.g.resize(rows), in.beta.resize(rows);
  for (auto& x : in.q) x = normal(rng);
  for (auto& x : in.k) x = normal(rng);
  for (auto& x : in.v) x = normal(rng);
  for (int64_t r = 0; r < rows; ++r) {
    normalize(&in.q[r * kd], kd);
    for (int64_t i = 0; i < kd; ++i) in.q[r * kd + i] /= std::sqrt(static_cast<float>(kd));
    normalize(&in.k[r * kd], kd);
    in.g[r] = -2.0f * unit(rng);  // decays between exp(-2) and 1
    in.beta[r] = unit(rng);
  }
  return in;
}

struct ChunkedState {
  ChunkedState(int64_t kd, int64_t vd)
      : s(kd * vd), keys(kDeltaRuleChunk * kd), cum(kDeltaRuleChunk), values(kDeltaRuleChunk * vd) {}
  DeltaRuleHead head() { return {s.data(), keys.data(), cum.data(), values.data()}; }
  std::vector<float> s, keys, cum, values;
};

// Runs the chunked form with the rows arriving in pieces of `piece` rows; returns the outputs.
std::vector<float> run_chunked(const Inputs& in, int64_t piece, std::vector<float>* final_state = nullptr) {
  ChunkedState st(in.kd, in.vd);
  std::vector<float> out(in.rows * in.vd);
  for (int64_t r = 0; r < in.rows; r += piece) {
    const int64_t n = std::min(piece, in.rows - r);
    delta_rule_chunked(st.head(), in.kd, in.vd, r % kDeltaRuleChunk, n, &in.q[r * in.kd], &in.k[r * in.kd],
                       &in.v[r * in.vd], &in.g[r], &in.beta[r], &out[r * in.vd]);
  }
  if (final_state) {
    final_state->resize(in.kd * in.vd);
    delta_rule_current_state(st.head(), in.kd, in.vd, in.rows % kDeltaRuleChunk, final_state->data());
  }
  return out;
}

double max_relative(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(want[i])));
  }
  return diff / ref;
}

TEST(DeltaRule, ChunkedAgreesWithPerToken) {
  for (int64_t rows : {1, 5, 63, 64, 65, 200}) {
    const Inputs in = random_inputs(rows, 16, 32, static_cast<uint32_t>(rows));
    std::vector<float> chunked_state, recurrent_state(16 * 32, 0.0f), recurrent(rows * 32);
    const auto chunked = run_chunked(in, rows, &chunked_state);
    delta_rule_recurrent(recurrent_state.data(), 16, 32, rows, in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                         in.beta.data(), recurrent.data());
    const double out_error = max_relative(chunked, recurrent),
                 state_error = max_relative(chunked_state, recurrent_state);
    std::printf("delta rule, %3lld rows: outputs %.3g, final state %.3g\n", static_cast<long long>(rows), out_error,
                state_error);
    EXPECT_LE(out_error, 1e-5) << rows;
    EXPECT_LE(state_error, 1e-5) << rows;
  }
}

TEST(DeltaRule, ChunkedRowsDoNotDependOnHowTheyArrive) {
  const Inputs in = random_inputs(150, 16, 32, 7);
  const auto whole = run_chunked(in, 150);
  for (int64_t piece : {1, 3, 7, 64, 100}) {
    const auto cut = run_chunked(in, piece);
    EXPECT_EQ(std::memcmp(cut.data(), whole.data(), whole.size() * sizeof(float)), 0) << piece;
  }
}

TEST(Matmul, MatchesAReferenceLoopForEveryShape) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {3, 5, 7}, {17, 33, 64}, {2, 100, 129}}) {
    std::vector<float> x(m * k), y(m * n);
    std::vector<uint16_t> w(n * k);
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = float_to_bf16(normal(rng));
    Weight weight{WeightType::bf16, w.data(), n, k};
    matmul(x.data(), m, weight, y.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t t = 0; t < k; ++t) want += static_cast<double>(x[i * k + t]) * bf16_to_float(w[j * k + t]);
        EXPECT_NEAR(y[i * n + j], want, 1e-5 * (1 + std::fabs(want))) << m << "x" << n << "x" << k;
      }
    // A row's result does not depend on the other rows: row 0 alone gives the same bytes.
    std::vector<float> alone(n);
    matmul(x.data(), 1, weight, alone.data());
    EXPECT_EQ(std::memcmp(alone.data(), y.data(), n * sizeof(float)), 0);
  }
}

// The attention loops' pieces: a page of scores equals dot() on each key bit for bit, and the weighted sum of a page
// of values is, element by element, the chain of roundings of the plain loop over the rows in order (what the CPU
// attention computed before it kept the sums in registers), for head sizes that fill vectors and ones that do not.
TEST(AttentionRows, ScoresAreDotAndSumsAreThePlainLoopBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  int reversed_differs = 0;
  for (int64_t k : {1, 7, 8, 31, 32, 33, 64, 256, 259})
    for (int64_t count : {1, 3, 4, 5, 64}) {
      const int64_t stride = 2 * k + 3;  // rows interleaved with other heads' values, as in a KV page
      std::vector<float> x(k), rows(count * stride), p(count);
      for (auto& v : x) v = normal(rng);
      for (auto& v : rows) v = normal(rng);
      for (auto& v : p) v = std::fabs(normal(rng));
      std::vector<float> scores(count);
      dot_rows(x.data(), rows.data(), stride, count, k, scores.data());
      for (int64_t j = 0; j < count; ++j) {
        const float want = dot(x.data(), rows.data() + j * stride, k);
        EXPECT_EQ(std::memcmp(&scores[j], &want, sizeof want), 0) << k << " " << count << " " << j;
      }
      std::vector<float> start(k), sums(k), want(k), backwards(k);
      for (auto& v : start) v = normal(rng);
      sums = want = backwards = start;
      accumulate_rows(p.data(), rows.data(), stride, count, k, sums.data());
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t j = 0; j < count; ++j) {
          const float product = p[j] * rows[j * stride + i];
          want[i] = want[i] + product;
        }
        for (int64_t j = count - 1; j >= 0; --j) {
          const float product = p[j] * rows[j * stride + i];
          backwards[i] = backwards[i] + product;
        }
      }
      EXPECT_EQ(std::memcmp(sums.data(), want.data(), k * sizeof(float)), 0) << k << " " << count;
      // Two heads over the same rows (GQA): each gets what a call of its own gives.
      std::vector<float> q(count), other(k), other_alone(k), first(k);
      for (auto& v : q) v = std::fabs(normal(rng));
      for (auto& v : other) v = normal(rng);
      other_alone = other;
      first = start;
      accumulate_rows2(p.data(), q.data(), rows.data(), stride, count, k, first.data(), other.data());
      accumulate_rows(q.data(), rows.data(), stride, count, k, other_alone.data());
      EXPECT_EQ(std::memcmp(first.data(), want.data(), k * sizeof(float)), 0) << k << " " << count;
      EXPECT_EQ(std::memcmp(other.data(), other_alone.data(), k * sizeof(float)), 0) << k << " " << count;
      reversed_differs += std::memcmp(backwards.data(), want.data(), k * sizeof(float)) != 0;
    }
  // Planted control: the same sums in the other order round differently somewhere, so bit equality above is a real
  // constraint on the order, not something any order would meet.
  EXPECT_GT(reversed_differs, 10);
}

// The prompt cache's snapshot states are made when first used (a server start made hundreds of them): until then none
// exists, a state made on use reads as a new one, a snapshot never taken serializes as a new state's bytes, and a
// saved one as the slot's.
TEST(LazyGdnStates, MadeOnFirstUseAndNewUntilWritten) {
  const GdnShape shape{
      .hidden = 64, .key_heads = 2, .value_heads = 4, .key_dim = 16, .value_dim = 32, .conv_kernel = 4};
  LazyGdnStates states(shape, 1000);
  for (size_t i = 0; i < states.size(); ++i) ASSERT_EQ(states.made(i), nullptr) << i;
  CpuGdnState& used = states[7];
  EXPECT_EQ(states.made(7), &used);
  EXPECT_EQ(states.made(6), nullptr);
  const CpuGdnState fresh(shape);
  EXPECT_EQ(used.conv_history, fresh.conv_history);
  EXPECT_EQ(used.boundary_states, fresh.boundary_states);
  EXPECT_EQ(used.chunk_values, fresh.chunk_values);
  EXPECT_EQ(used.position, 0);

  const AttentionShape attention{.hidden = 64, .q_heads = 2, .kv_heads = 1, .head_dim = 32};
  CpuStateStorage storage(nullptr, shape, 3, 2, attention, 1, 4, 50);
  const std::vector<std::byte> untouched = storage.snapshot_bytes(9);
  EXPECT_EQ(untouched.size(), 3 * (CpuGdnState::bytes_for(shape) + sizeof(int64_t)));
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](std::byte b) { return b == std::byte{0}; }));
  storage.gdn(1, 2).boundary_states[5] = 1.5f;
  storage.gdn(1, 2).position = 3;
  storage.save_snapshot(1, 9);
  EXPECT_EQ(storage.snapshot_gdn(9, 2).boundary_states[5], 1.5f);
  EXPECT_NE(storage.snapshot_bytes(9), untouched);  // control: the bytes do follow what was saved
  storage.restore_snapshot(9, 0);
  EXPECT_EQ(storage.gdn(0, 2).position, 3);
}

// The CPU storage's penalty counts (penalty_counts.h), by hand: a batch's updates checked before any applies, its
// clears first (a slot cleared and refilled in one batch keeps the refill), prompt marks idempotent, generated counted.
TEST(CpuStateStorage, PenaltyCountsApplyCheckedUpdatesClearsFirst) {
  using Kind = CountsUpdate::Kind;
  const GdnShape shape{
      .hidden = 64, .key_heads = 2, .value_heads = 4, .key_dim = 16, .value_dim = 32, .conv_kernel = 4};
  const AttentionShape attention{.hidden = 64, .q_heads = 2, .kv_heads = 1, .head_dim = 32};
  CpuStateStorage storage(nullptr, shape, 1, 3, attention, 1, 4, 0);
  const CountsUpdate first[] = {{0, 5, Kind::prompt},    {0, 5, Kind::prompt},    {0, 7, Kind::prompt},
                                {0, 7, Kind::generated}, {0, 7, Kind::generated}, {0, 9, Kind::generated},
                                {1, 5, Kind::generated}};
  EXPECT_THROW(storage.update_counts(first), Error) << "updates before prepare_counts";
  storage.prepare_counts(10);
  storage.update_counts(first);
  const PenaltyCounts& zero = storage.counts(0);
  EXPECT_TRUE(zero.in_prompt(5) && zero.generated(5) == 0);
  EXPECT_TRUE(zero.in_prompt(7) && zero.generated(7) == 2);
  EXPECT_TRUE(!zero.in_prompt(9) && zero.generated(9) == 1 && zero.seen(9));
  EXPECT_FALSE(zero.seen(6));
  EXPECT_EQ(zero.words().size(), 3u);
  EXPECT_EQ(storage.counts(1).generated(5), 1u);
  EXPECT_FALSE(storage.counts(1).in_prompt(5));

  // Slot 0's next sequence: its ids come before the clear in the batch, and must survive it.
  const CountsUpdate second[] = {{0, 3, Kind::prompt}, {0, 3, Kind::generated}, {0, 0, Kind::clear}};
  storage.update_counts(second);
  EXPECT_EQ(storage.counts(0).words().size(), 1u);
  EXPECT_EQ(storage.counts(0).word(3), kCountsInPrompt | 1u);
  EXPECT_EQ(storage.counts(1).generated(5), 1u) << "another slot's clear";

  // Checked first: a bad id or slot refuses the batch, and its good updates do not apply either.
  const CountsUpdate bad_id[] = {{1, 5, Kind::generated}, {1, 10, Kind::generated}};
  EXPECT_THROW(storage.update_counts(bad_id), Error);
  const CountsUpdate bad_slot[] = {{1, 0, Kind::clear}, {3, 1, Kind::prompt}};
  EXPECT_THROW(storage.update_counts(bad_slot), Error);
  EXPECT_EQ(storage.counts(1).generated(5), 1u);
  EXPECT_THROW(storage.counts(3), Error);
}

}  // namespace
}  // namespace duet::backend::cpu
