// The GDN kernels (gdn_conv.cu, gdn_gates.cu, gdn_delta_rule.cu, gdn_norm.cu) against host references written here
// from the CPU backend's math, at the tiny test-model shape and the Qwen3.5-9B shape; plus row invariance (a piece
// gives the same bits alone or beside others) and cut invariance (a piece run whole or cut over several steps).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/delta_chunks.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "gdn_test_steps.h"

namespace duet::backend::cuda {
namespace {

using namespace ::duet::backend::cuda::gdn_testing;  // NOLINT: the steps and states of every test here
using ::duet::testing::DeviceBuffer;
using ::duet::testing::max_relative_error;
using ::duet::testing::random_bf16_values;
using ::duet::testing::round_bf16;
using ::duet::testing::same_bits;
using ::duet::testing::to_bf16;
using ::duet::testing::to_float;

// Rounding a value to BF16 moves it by at most half an ulp, which is at most 2^-8 of its magnitude.
constexpr double kHalfBf16Ulp = 1.0 / 256;

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// A weight on the device as f32 or bf16 (the same values: they are BF16-representable).
class Weight {
 public:
  Weight(const std::vector<float>& values, bool f32, int64_t rows, int64_t cols)
      : f32_values_(f32 ? values : std::vector<float>()), bf16_values_(f32 ? std::vector<bf16>() : to_bf16(values)) {
    weight_.data = f32 ? static_cast<const void*>(f32_values_.get()) : static_cast<const void*>(bf16_values_.get());
    weight_.f32 = f32;
    weight_.rows = rows;
    weight_.cols = cols;
  }
  DeviceWeight get() const { return weight_; }

 private:
  DeviceBuffer<float> f32_values_;
  DeviceBuffer<bf16> bf16_values_;
  DeviceWeight weight_;
};

std::vector<float> concat(const std::vector<std::vector<float>>& parts) {
  std::vector<float> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}
// ---- Host references, following the CPU backend (gdn_mixer.cc, delta_rule.cc, norms.cc) in double.

// The conv + SiLU of one piece (before rounding to BF16) and the history it leaves. history: [K-1, channels].
void conv_reference(const std::vector<float>& in, int32_t first_row, int32_t rows, const std::vector<float>& w,
                    int32_t channels, std::vector<float>& history, std::vector<double>& out) {
  for (int32_t c = 0; c < channels; ++c) {
    std::vector<double> window;  // [history | the piece's inputs]
    for (int32_t j = 0; j < kHistory; ++j) window.push_back(history[j * channels + c]);
    for (int32_t t = 0; t < rows; ++t) window.push_back(in[static_cast<int64_t>(first_row + t) * channels + c]);
    for (int32_t t = 0; t < rows; ++t) {
      double acc = 0;
      for (int32_t j = 0; j < kConvKernel; ++j) acc += static_cast<double>(w[c * kConvKernel + j]) * window[t + j];
      out[static_cast<int64_t>(first_row + t) * channels + c] = silu(acc);
    }
    for (int32_t j = 0; j < kHistory; ++j) history[j * channels + c] = static_cast<float>(window[rows + j]);
  }
}

// x / sqrt(sum(x^2) + 1e-6) in double, as the CPU's l2_normalize.
std::vector<double> l2_normalized(const float* x, int32_t n) {
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(sum + 1e-6);
  std::vector<double> out(n);
  for (int32_t i = 0; i < n; ++i) out[i] = x[i] * inv;
  return out;
}

// The full state S [value_heads, key_dim, value_dim] in double that a layer's chunked state holds at `position`
// (delta_chunks.h): per head e^{G_last} S_b + sum_s e^{G_last - G_s} keys_s d_s^T over the chunk's position % 64 rows.
std::vector<double> full_state(const GdnDims& d, const std::vector<float>& layer_state, int32_t position) {
  const DeltaHeadState layout = delta_head(d);
  const int32_t rows = position % kDeltaChunk, KD = d.key_dim, VD = d.value_dim;
  std::vector<double> S(static_cast<size_t>(d.value_heads) * KD * VD);
  for (int32_t h = 0; h < d.value_heads; ++h) {
    const float* head = layer_state.data() + h * layout.elems();
    const double last = rows > 0 ? head[layout.G() + rows - 1] : 0.0;
    for (int32_t i = 0; i < KD; ++i)
      for (int32_t j = 0; j < VD; ++j) {
        double x = std::exp(last) * head[i * VD + j];
        for (int32_t s = 0; s < rows; ++s)
          x += std::exp(last - head[layout.G() + s]) * head[layout.keys() + s * KD + i] * head[layout.d() + s * VD + j];
        S[(static_cast<size_t>(h) * KD + i) * VD + j] = x;
      }
  }
  return S;
}

// The per-token delta rule of one piece in double: state [value_heads, key_dim, value_dim] is advanced in place,
// out: [rows, value_heads * value_dim] at the piece's rows.
void delta_reference(const GdnDims& d, const std::vector<float>& qkv, const std::vector<float>& beta,
                     const std::vector<float>& g, int32_t first_row, int32_t rows, std::vector<double>& state,
                     std::vector<double>& out) {
  const int32_t width = conv_channels(d), key_width = d.key_heads * d.key_dim, group = d.value_heads / d.key_heads;
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(d.key_dim));
  for (int32_t h = 0; h < d.value_heads; ++h) {
    double* s = state.data() + static_cast<int64_t>(h) * d.key_dim * d.value_dim;
    const int32_t key_head = h / group;
    for (int32_t t = 0; t < rows; ++t) {
      const int64_t r = first_row + t;
      const float* row = qkv.data() + r * width;
      std::vector<double> q = l2_normalized(row + key_head * d.key_dim, d.key_dim);
      const std::vector<double> k = l2_normalized(row + key_width + key_head * d.key_dim, d.key_dim);
      for (double& x : q) x *= q_scale;
      const float* v = row + 2 * key_width + h * d.value_dim;
      const double decay = std::exp(static_cast<double>(g[r * d.value_heads + h]));
      const double b = beta[r * d.value_heads + h];
      for (int64_t i = 0; i < static_cast<int64_t>(d.key_dim) * d.value_dim; ++i) s[i] *= decay;
      for (int32_t j = 0; j < d.value_dim; ++j) {
        double read = 0;
        for (int32_t i = 0; i < d.key_dim; ++i) read += s[i * d.value_dim + j] * k[i];
        const double delta = (v[j] - read) * b;
        double o = 0;
        for (int32_t i = 0; i < d.key_dim; ++i) {
          s[i * d.value_dim + j] += k[i] * delta;
          o += s[i * d.value_dim + j] * q[i];
        }
        out[r * value_width(d) + h * d.value_dim + j] = o;
      }
    }
  }
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// ---- The fixture: one parameter per shape.

// Pieces of different lengths (a decode row, a short prefill, a whole chunk, a chunk and one) at non-zero positions,
// each its own sequence.
// A decode row, and prefill pieces that start inside a chunk, fill one exactly, straddle two, and run several.
const std::vector<PieceSpec> kMixedPieces = {{0, 1, 37}, {1, 7, 5}, {2, 64, 128}, {3, 65, 200}, {4, 200, 0}};
const std::vector<uint64_t> kMixedSeeds = {11, 12, 13, 14, 15};
// A decode step: five one-row pieces (the conv's one-kernel path), at positions inside, at the end of and at the
// start of a chunk.
const std::vector<PieceSpec> kDecodePieces = {{0, 1, 37}, {1, 1, 63}, {2, 1, 0}, {3, 1, 200}, {4, 1, 5}};

class GdnKernelsTest : public ::testing::TestWithParam<Shape> {
 protected:
  const GdnDims& dims() const { return GetParam().dims; }
  void check_conv_against_reference(const std::vector<PieceSpec>& pieces, bool f32_weight);
};

// ---- Conv.

TEST_P(GdnKernelsTest, ConvSiluMatchesReferenceAndKeepsLastInputs) {
  DUET_REQUIRE_GPU();
  for (const auto* pieces : {&kMixedPieces, &kDecodePieces})
    for (bool f32_weight : {false, true}) {
      SCOPED_TRACE(std::string(f32_weight ? "f32 conv weight" : "bf16 conv weight") +
                   (pieces == &kDecodePieces ? ", decode step" : ", mixed step"));
      check_conv_against_reference(*pieces, f32_weight);
    }
}

// A conv launch over `pieces` (each its own sequence of kMixedSeeds) with gates' inputs drawn from `seed`: its outputs,
// beta and g (computed beside the conv, or by the gates kernel after it when `beside` is false), every piece's state.
struct ConvGatesRun {
  std::vector<float> out, beta, g;
  std::vector<std::vector<float>> conv_states;
};
ConvGatesRun run_conv_and_gates(const GdnDims& d, const std::vector<PieceSpec>& pieces, const std::vector<float>& in,
                                const Weight& conv_w, uint64_t seed, bool beside) {
  const int32_t channels = conv_channels(d), heads = d.value_heads, rows = total_rows(pieces);
  const Weight a_log_w(random_bf16_values(static_cast<size_t>(heads), seed + 2, -2.0f, 1.5f), true, heads, 1);
  const Weight dt_bias_w(random_bf16_values(static_cast<size_t>(heads), seed + 3, -2.0f, 2.0f), false, heads, 1);
  DeviceBuffer<bf16> b_d(to_bf16(random_bf16_values(static_cast<size_t>(rows) * heads, seed + 5, -6.0f, 6.0f)));
  DeviceBuffer<bf16> a_d(to_bf16(random_bf16_values(static_cast<size_t>(rows) * heads, seed + 6, -10.0f, 24.0f)));
  States states(d, kMixedSeeds);
  Step step(pieces, states);
  DeviceBuffer<bf16> in_d(to_bf16(in)), out_d(in.size());
  DeviceBuffer<float> beta_d(static_cast<size_t>(rows) * heads), g_d(static_cast<size_t>(rows) * heads);
  out_d.poison();
  beta_d.poison();
  g_d.poison();
  const GdnGateArrays gates{b_d.get(), a_d.get(), a_log_w.get(), dt_bias_w.get(), heads, beta_d.get(), g_d.get()};
  launch_gdn_conv_silu(step.get(), kLayer, conv_w.get(), channels, kConvKernel, in_d.get(), out_d.get(), nullptr,
                       beside ? &gates : nullptr);
  if (!beside)
    launch_gdn_gates(b_d.get(), a_d.get(), a_log_w.get(), dt_bias_w.get(), rows, heads, beta_d.get(), g_d.get(),
                     nullptr);
  sync_ok();
  ConvGatesRun r{to_float(out_d.download()), beta_d.download(), g_d.download(), {}};
  for (const PieceSpec& spec : pieces) r.conv_states.push_back(states.conv_now(spec.sequence, kLayer));
  return r;
}

void expect_same_conv_and_gates(const ConvGatesRun& a, const ConvGatesRun& b) {
  ASSERT_TRUE(all_finite(a.out) && all_finite(a.beta) && all_finite(a.g)) << "outputs left unwritten";
  EXPECT_TRUE(same_bits(a.out, b.out)) << "conv output";
  EXPECT_TRUE(same_bits(a.beta, b.beta)) << "beta";
  EXPECT_TRUE(same_bits(a.g, b.g)) << "g";
  for (size_t i = 0; i < a.conv_states.size(); ++i)
    EXPECT_TRUE(same_bits(a.conv_states[i], b.conv_states[i])) << "conv state of piece " << i;
}

// The gates computed beside the conv (one block more per row) have the bits of the gates kernel, and the conv's
// outputs and states are those of a launch without gates, in a mixed step and in a decode step.
TEST_P(GdnKernelsTest, GatesBesideTheConvHaveTheGatesKernelsBits) {
  DUET_REQUIRE_GPU();
  const int32_t channels = conv_channels(dims());
  const Weight conv_w(random_bf16_values(static_cast<size_t>(channels) * kConvKernel, 305, -0.6f, 0.6f), false,
                      channels, kConvKernel);
  for (const auto* pieces : {&kMixedPieces, &kDecodePieces}) {
    SCOPED_TRACE(pieces == &kDecodePieces ? "decode step" : "mixed step");
    const std::vector<float> in = random_bf16_values(static_cast<size_t>(total_rows(*pieces)) * channels, 301);
    expect_same_conv_and_gates(run_conv_and_gates(dims(), *pieces, in, conv_w, 301, false),
                               run_conv_and_gates(dims(), *pieces, in, conv_w, 301, true));
  }
}

// The wide conv kernel (eight channels and four rows a thread, DUET_CONV_WIDE=1, for steps with a piece of several
// rows) gives the one-channel kernel's bits: outputs, the gates beside them and every piece's conv state, over
// kMixedPieces (a thread's four rows cross pieces there, and short pieces read their first inputs from the state), with
// BF16 and fp32 conv weights. The control: one input moved by 0.25 changes the wide kernel's outputs.
TEST_P(GdnKernelsTest, WideConvRowsGiveTheOneChannelKernelsBits) {
  DUET_REQUIRE_GPU();
  const int32_t channels = conv_channels(dims());
  const std::vector<float> in = random_bf16_values(static_cast<size_t>(total_rows(kMixedPieces)) * channels, 311);
  auto run = [&](int32_t wide, const std::vector<float>& input, const Weight& conv_w) {
    set_conv_rows_wide_for_tests(wide);
    ConvGatesRun r = run_conv_and_gates(dims(), kMixedPieces, input, conv_w, 311, true);
    set_conv_rows_wide_for_tests(-1);
    return r;
  };
  for (bool f32_weight : {false, true}) {
    SCOPED_TRACE(f32_weight ? "f32 conv weight" : "bf16 conv weight");
    const Weight conv_w(random_bf16_values(static_cast<size_t>(channels) * kConvKernel, 315, -0.6f, 0.6f), f32_weight,
                        channels, kConvKernel);
    const ConvGatesRun one = run(0, in, conv_w);
    expect_same_conv_and_gates(one, run(1, in, conv_w));
    std::vector<float> nudged = in;
    const size_t at = static_cast<size_t>(100) * channels + 5;
    nudged[at] = round_bf16(nudged[at] + 0.25f);
    EXPECT_FALSE(same_bits(one.out, run(1, nudged, conv_w).out)) << "the control: a moved input changed nothing";
  }
}

// The conv of `pieces` (each its own sequence of kMixedSeeds) against the double reference, and the states it leaves.
void GdnKernelsTest::check_conv_against_reference(const std::vector<PieceSpec>& pieces, bool f32_weight) {
  const int32_t channels = conv_channels(dims()), rows = total_rows(pieces);
  const std::vector<float> in = random_bf16_values(static_cast<size_t>(rows) * channels, 101);
  const std::vector<float> w = random_bf16_values(static_cast<size_t>(channels) * kConvKernel, 102, -0.6f, 0.6f);
  {
    States states(dims(), kMixedSeeds);
    Step step(pieces, states);
    Weight weight(w, f32_weight, channels, kConvKernel);
    DeviceBuffer<bf16> in_d(to_bf16(in)), out_d(in.size());
    out_d.poison();
    launch_gdn_conv_silu(step.get(), kLayer, weight.get(), channels, kConvKernel, in_d.get(), out_d.get(), nullptr);
    sync_ok();
    const std::vector<float> out = to_float(out_d.download());

    std::vector<double> expected(in.size());
    int32_t first_row = 0;
    for (const PieceSpec& spec : pieces) {
      std::vector<float> history = states.initial_conv(spec.sequence, kLayer);
      conv_reference(in, first_row, spec.rows, w, channels, history, expected);
      // The history holds copies of inputs: exact.
      EXPECT_TRUE(same_bits(states.conv_now(spec.sequence, kLayer), history)) << "piece of " << spec.rows << " rows";
      EXPECT_TRUE(same_bits(states.conv_now(spec.sequence, 0), states.initial_conv(spec.sequence, 0)))
          << "layer 0 was touched";
      first_row += spec.rows;
    }
    // The GPU sums 4 products in fp32 (error ~1e-7 of the terms, covered by the 1e-6 absolute slack) and rounds the
    // SiLU once to BF16 (at most half an ulp, 2^-8 relative); the reference is the unrounded double result.
    int bad = 0;
    for (size_t i = 0; i < out.size() && bad < 10; ++i) {
      const double tolerance = std::fabs(expected[i]) * kHalfBf16Ulp * 1.01 + 1e-6;
      if (!(std::fabs(out[i] - expected[i]) <= tolerance)) {
        ADD_FAILURE() << "out[" << i / channels << ", " << i % channels << "] = " << out[i] << ", expected "
                      << expected[i];
        ++bad;
      }
    }
  }
}

// ---- Gates.

TEST_P(GdnKernelsTest, GatesMatchReference) {
  DUET_REQUIRE_GPU();
  const int32_t heads = dims().value_heads;
  const int64_t rows = 137;
  const std::vector<float> b = random_bf16_values(static_cast<size_t>(rows * heads), 201, -6.0f, 6.0f);
  // a + dt_bias spans [-12, 26]: both sides of softplus's threshold at 20.
  const std::vector<float> a = random_bf16_values(static_cast<size_t>(rows * heads), 202, -10.0f, 24.0f);
  const std::vector<float> a_log = random_bf16_values(static_cast<size_t>(heads), 203, -2.0f, 1.5f);
  const std::vector<float> dt_bias = random_bf16_values(static_cast<size_t>(heads), 204, -2.0f, 2.0f);
  DeviceBuffer<bf16> b_d(to_bf16(b)), a_d(to_bf16(a));
  for (bool a_log_f32 : {true, false}) {
    SCOPED_TRACE(a_log_f32 ? "A_log f32, dt_bias bf16" : "A_log bf16, dt_bias f32");
    Weight a_log_w(a_log, a_log_f32, heads, 1), dt_bias_w(dt_bias, !a_log_f32, heads, 1);
    DeviceBuffer<float> beta_d(b.size()), g_d(b.size());
    beta_d.poison();
    g_d.poison();
    launch_gdn_gates(b_d.get(), a_d.get(), a_log_w.get(), dt_bias_w.get(), rows, heads, beta_d.get(), g_d.get(),
                     nullptr);
    sync_ok();
    const std::vector<float> beta = beta_d.download(), g = g_d.download();
    for (int64_t i = 0; i < rows * heads; ++i) {
      const int64_t h = i % heads;
      const double beta_ref = 1.0 / (1.0 + std::exp(-static_cast<double>(b[i])));
      // beta is the fp32 sigmoid (a few ulp, ~1e-6 relative) rounded to BF16 (half an ulp, 2^-8 relative).
      ASSERT_EQ(beta[i], round_bf16(beta[i])) << "beta[" << i << "] is not a BF16 value";
      ASSERT_NEAR(beta[i], beta_ref, beta_ref * kHalfBf16Ulp * 1.01) << "beta[" << i << "]";
      // The fp32 sum a + dt_bias as the kernel forms it, so both sides pick the same softplus branch.
      const double x = static_cast<float>(a[i] + dt_bias[h]);
      const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
      const double g_ref = -std::exp(static_cast<double>(a_log[h])) * softplus;
      // g is three fp32 operations (exp, log1p(exp), product), each within a few ulp: 1e-5 relative is ample.
      ASSERT_NEAR(g[i], g_ref, std::fabs(g_ref) * 1e-5) << "g[" << i << "]";
    }
  }
}

// ---- Delta rule.

// The delta rule's largest error against the double recurrence over kMixedPieces (decode rows, a chunk entered in its
// middle, WY chunks whole and partial): the outputs' and the final states' relative errors, the largest of them.
double delta_rule_error_against_double(const GdnDims& d) {
  const int32_t rows = total_rows(kMixedPieces);
  const DeltaInputs in = random_delta_inputs(d, rows, 301);
  States states(d, kMixedSeeds);
  Step step(kMixedPieces, states);
  DeviceDeltaInputs in_d(in);
  DeviceBuffer<float> out_d(static_cast<size_t>(rows) * value_width(d));
  out_d.poison();
  launch_gdn_delta_rule(step.get(), kLayer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                        out_d.get(), nullptr);
  sync_ok();
  const std::vector<float> out = out_d.download();

  std::vector<double> expected(out.size());
  int32_t first_row = 0;
  double worst = 0;
  for (const PieceSpec& spec : kMixedPieces) {
    SCOPED_TRACE("piece of " + std::to_string(spec.rows) + " rows");
    std::vector<double> state = full_state(d, states.initial_delta(spec.sequence, kLayer), spec.start);
    delta_reference(d, in.qkv, in.beta, in.g, first_row, spec.rows, state, expected);
    const std::vector<float> expected_rows = rows_of(to_float(expected), value_width(d), first_row, spec.rows);
    worst = std::max(worst, max_relative_error(rows_of(out, value_width(d), first_row, spec.rows), expected_rows));
    const std::vector<double> now = full_state(d, states.delta_now(spec.sequence, kLayer), spec.start + spec.rows);
    worst = std::max(worst, max_relative_error(to_float(now), to_float(state)));
    EXPECT_TRUE(same_bits(states.delta_now(spec.sequence, 0), states.initial_delta(spec.sequence, 0)))
        << "layer 0 was touched";
    first_row += spec.rows;
  }
  return worst;
}

// fp32 against double: each token's reads of S are key_dim-term fp32 sums and the errors of earlier tokens decay or
// stay bounded (|k| = 1, beta <= 1, exp(g) < 1). A host emulation of the kernel's fp32 order on these input ranges
// measured ~2e-7 of the largest value, for 65 to 300 tokens at both shapes; 1e-5 leaves margin for the GPU's expf and
// rsqrtf, while a wrong index or a missed token gives errors of order 1.
constexpr double kDeltaRuleBar = 1e-5;

TEST_P(GdnKernelsTest, DeltaRuleMatchesDoubleRecurrence) {
  DUET_REQUIRE_GPU();
  EXPECT_LT(delta_rule_error_against_double(dims()), kDeltaRuleBar);
}

// The walk's tensor-core form (the default since the 46th round: a WY chunk's products in three TF32 passes) keeps the
// fp32 bar, as the FMA form does (DUET_DELTA_WALK_MMA=0).
// The control: one TF32 pass (about 11 bits a product) must miss it, or the bar could not tell fp32 from TF32.
TEST_P(GdnKernelsTest, TensorCoreWalkMatchesDoubleRecurrence) {
  DUET_REQUIRE_GPU();
  set_delta_walk_mma_for_tests(0);
  const double fma_form = delta_rule_error_against_double(dims());
  set_delta_walk_mma_for_tests(3);
  const double three_passes = delta_rule_error_against_double(dims());
  set_delta_walk_mma_for_tests(1);
  const double one_pass = delta_rule_error_against_double(dims());
  set_delta_walk_mma_for_tests(-1);
  std::printf("delta rule against double: FMA form %.3g, tensor cores %.3g, one TF32 pass (control) %.3g\n", fma_form,
              three_passes, one_pass);
  EXPECT_LT(three_passes, kDeltaRuleBar);
  EXPECT_GT(one_pass, kDeltaRuleBar) << "the control: TF32's precision passed the fp32 bar";
}

// ---- Gated norm.

TEST_P(GdnKernelsTest, GatedNormMatchesReferenceRoundingPoints) {
  DUET_REQUIRE_GPU();
  const int32_t heads = dims().value_heads, dim = dims().value_dim;
  const int64_t rows = 137, n = rows * heads * dim;
  const std::vector<float> o = random_bf16_values(static_cast<size_t>(n), 401, -2.0f, 2.0f);
  const std::vector<float> z = random_bf16_values(static_cast<size_t>(n), 402, -4.0f, 4.0f);
  const std::vector<float> w = random_bf16_values(static_cast<size_t>(dim), 403, -1.5f, 1.5f);
  DeviceBuffer<float> o_d(o);
  DeviceBuffer<bf16> z_d(to_bf16(z));
  for (bool f32_weight : {true, false}) {
    SCOPED_TRACE(f32_weight ? "f32 norm weight" : "bf16 norm weight");
    Weight weight(w, f32_weight, dim, 1);
    DeviceBuffer<bf16> out_d(static_cast<size_t>(n));
    out_d.poison();
    launch_gdn_gated_norm(o_d.get(), z_d.get(), weight.get(), kNormEps, rows, heads, dim, out_d.get(), nullptr);
    sync_ok();
    const std::vector<float> out = to_float(out_d.download());

    int64_t differing = 0;
    for (int64_t v = 0; v < rows * heads; ++v) {
      const float* x = o.data() + v * dim;
      double sum = 0;
      for (int32_t i = 0; i < dim; ++i) sum += static_cast<double>(x[i]) * x[i];
      const double inv_rms = 1.0 / std::sqrt(sum / dim + kNormEps);
      for (int32_t i = 0; i < dim; ++i) {
        const int64_t at = v * dim + i;
        // The spec's rounding points: normalized value to BF16, times the weight to BF16, times silu(z), to BF16.
        const float normalized = round_bf16(static_cast<float>(x[i] * inv_rms));
        const float weighted = round_bf16(w[i] * normalized);
        const double expected = weighted * silu(z[at]);
        // Where fp32 and double sit on opposite sides of a BF16 rounding tie, an intermediate lands one ulp away
        // (2^-7 relative at most) and the next rounding can add one more: 2^-6 bounds two such steps plus the
        // final half ulp. Such ties are rare, so nearly every output must equal the reference's BF16 exactly.
        ASSERT_NEAR(out[at], expected, std::fabs(expected) * (4 * kHalfBf16Ulp) + 1e-30) << "out[" << at << "]";
        if (out[at] != round_bf16(static_cast<float>(expected))) ++differing;
      }
    }
    // Without the two intermediate roundings (or with them misplaced) a large share of outputs would differ.
    EXPECT_LE(differing, n / 100) << differing << " of " << n << " outputs differ from the reference's BF16";
  }
}

// The decode kernels' gated norm (the delta rule with `norm`) has gated_norm_kernel's bits on the same delta-rule
// outputs, in a decode step and beside prefill pieces (where it writes the rows of the pieces the decode kernels take
// only: one row, or a few inside one chunk, as the 7 rows from 5).
TEST_P(GdnKernelsTest, DecodeRowsGatedNormHasTheNormKernelsBits) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const int32_t vw = value_width(d);
  const Weight norm_w(random_bf16_values(static_cast<size_t>(d.value_dim), 703, -1.5f, 1.5f), false, d.value_dim, 1);
  for (const auto* pieces : {&kDecodePieces, &kMixedPieces}) {
    SCOPED_TRACE(pieces == &kDecodePieces ? "decode step" : "mixed step");
    const int32_t rows = total_rows(*pieces);
    const DeltaInputs in = random_delta_inputs(d, rows, 701);
    DeviceDeltaInputs in_d(in);
    DeviceBuffer<bf16> z_d(to_bf16(random_bf16_values(static_cast<size_t>(rows) * vw, 702, -4.0f, 4.0f)));
    States states(d, kMixedSeeds);
    Step step(*pieces, states);
    DeviceBuffer<float> out_d(static_cast<size_t>(rows) * vw);
    DeviceBuffer<bf16> fused_d(static_cast<size_t>(rows) * vw), apart_d(static_cast<size_t>(rows) * vw);
    out_d.poison();
    fused_d.poison();
    apart_d.poison();
    const GdnNormArrays norm{z_d.get(), norm_w.get(), kNormEps, fused_d.get()};
    launch_gdn_delta_rule(step.get(), kLayer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                          out_d.get(), nullptr, &norm);
    launch_gdn_gated_norm(out_d.get(), z_d.get(), norm_w.get(), kNormEps, rows, d.value_heads, d.value_dim,
                          apart_d.get(), nullptr);
    sync_ok();
    const std::vector<float> fused = to_float(fused_d.download()), apart = to_float(apart_d.download());
    ASSERT_TRUE(all_finite(apart)) << "delta-rule outputs left unwritten";
    int32_t first_row = 0, checked = 0;
    for (const PieceSpec& spec : *pieces) {
      if (spec.rows <= kDecodePieceRows && spec.start % kDeltaChunk + spec.rows <= kDeltaChunk) {
        EXPECT_TRUE(same_bits(rows_of(fused, vw, first_row, 1), rows_of(apart, vw, first_row, 1)))
            << "row " << first_row;
        ++checked;
      }
      first_row += spec.rows;
    }
    EXPECT_GT(checked, 0);
  }
}

// A step of one-row (and other) pieces through the delta rule with the gated norm, under the dense kernel's choice
// (from `dense_from` pieces, reading S_b by `loads`: set_delta_decode_dense_from_for_tests and
// set_delta_dense_loads_for_tests), `repeats` times on the state it leaves: its outputs, gated norms and every
// sequence's live state.
struct NormedStep {
  std::vector<float> out, normed;
  std::vector<std::vector<float>> states;
};
NormedStep run_normed_step(const GdnDims& d, const std::vector<PieceSpec>& pieces, const std::vector<uint64_t>& seeds,
                           const DeltaInputs& in, const std::vector<float>& z, const Weight& norm_w, int32_t dense_from,
                           int32_t loads, bool longest_first = false, int repeats = 1) {
  const int32_t rows = total_rows(pieces), vw = value_width(d);
  set_delta_decode_dense_from_for_tests(dense_from);
  set_delta_dense_loads_for_tests(loads);
  DeviceDeltaInputs in_d(in);
  DeviceBuffer<bf16> z_d(to_bf16(z));
  States states(d, seeds);
  Step step(pieces, states, StepOptions{.longest_first = longest_first});
  DeviceBuffer<float> out_d(static_cast<size_t>(rows) * vw);
  DeviceBuffer<bf16> normed_d(static_cast<size_t>(rows) * vw);
  out_d.poison();
  normed_d.poison();
  const GdnNormArrays norm{z_d.get(), norm_w.get(), kNormEps, normed_d.get()};
  for (int r = 0; r < repeats; ++r)
    launch_gdn_delta_rule(step.get(), kLayer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                          out_d.get(), nullptr, &norm);
  sync_ok();
  set_delta_decode_dense_from_for_tests(-1);
  set_delta_dense_loads_for_tests(-1);
  NormedStep result{out_d.download(), to_float(normed_d.download()), {}};
  const States::Snapshot now = states.now();
  for (size_t i = 0; i < pieces.size(); ++i)
    result.states.push_back(
        live_state(d, now.delta(static_cast<int32_t>(i), kLayer), pieces[i].start + pieces[i].rows));
  return result;
}

// The one-row pieces' dense kernel (decode_dense_kernel, DUET_DELTA_DECODE=dense), in batches
// (DUET_DELTA_DENSE_ROLL=0), with its rolling loads of 16 rows (DUET_DELTA_DENSE_BULK=0) and with its ring of bulk
// copies (the default), and either kernel with the one-row pieces latest in their chunk first
// (DUET_DELTA_ORDER=longest), gives decode_delta_kernel's bits in step order: outputs, gated norm and every sequence's
// state, in a step of one-row pieces inside, at the end of (the fold) and at the start of a chunk, beside pieces for
// the chunked form and the few-row kernel (so the dense kernel finds its pieces past theirs in the step's order). The
// control: one one-ulp change in one row's beta changes that row's bits and the next chunk's state, so the comparison
// sees the last bit.
TEST_P(GdnKernelsTest, DenseDecodeKernelGivesTheClusterFormsBits) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const int32_t vw = value_width(d);
  const std::vector<PieceSpec> pieces = {{0, 1, 37}, {1, 7, 5}, {2, 1, 63},   {3, 65, 200}, {4, 1, 127},
                                         {5, 3, 10}, {6, 1, 0}, {7, 1, 1000}, {8, 1, 191},  {9, 1, 62}};
  const std::vector<uint64_t> seeds = {31, 32, 33, 34, 35, 36, 37, 38, 39, 40};
  const int32_t rows = total_rows(pieces);
  const Weight norm_w(random_bf16_values(static_cast<size_t>(d.value_dim), 803, -1.5f, 1.5f), false, d.value_dim, 1);
  const std::vector<float> z = random_bf16_values(static_cast<size_t>(rows) * vw, 802, -4.0f, 4.0f);
  using Result = NormedStep;
  auto run = [&](int32_t dense_from, const DeltaInputs& in, int32_t loads = 0, bool longest_first = false) {
    return run_normed_step(d, pieces, seeds, in, z, norm_w, dense_from, loads, longest_first);
  };
  const DeltaInputs in = random_delta_inputs(d, rows, 801);
  const Result clusters = run(std::numeric_limits<int32_t>::max(), in);
  // The dense kernel in batches, with rolling loads and with the ring, and both forms with the one-row pieces latest
  // in their chunk first (DUET_DELTA_ORDER=longest; loads -1: the cluster form).
  const std::vector<std::pair<int32_t, bool>> forms = {{0, false},
                                                       {16, false},
                                                       {kDeltaDenseBulk, false},
                                                       {kDeltaDenseKeys, false},
                                                       {kDeltaDenseKeysVectorsFirst, false},
                                                       {16, true},
                                                       {kDeltaDenseBulk, true},
                                                       {kDeltaDenseKeys, true},
                                                       {-1, true}};
  for (const auto& [loads, longest] : forms) {
    SCOPED_TRACE("loads " +
                 std::string(loads == kDeltaDenseBulk               ? "by the ring"
                             : loads == kDeltaDenseKeys             ? "by the ring, keys too"
                             : loads == kDeltaDenseKeysVectorsFirst ? "by the ring, keys too, the vectors first"
                                                                    : std::to_string(loads) + " rows") +
                 (longest ? ", longest first" : ""));
    const Result dense = loads < 0 ? run(std::numeric_limits<int32_t>::max(), in, 0, true) : run(0, in, loads, longest);
    int32_t first_row = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const PieceSpec& spec = pieces[i];
      SCOPED_TRACE("piece " + std::to_string(i) + " at " + std::to_string(spec.start));
      const std::vector<float> out = rows_of(dense.out, vw, first_row, spec.rows);
      ASSERT_TRUE(all_finite(out)) << "outputs left unwritten";
      EXPECT_TRUE(same_bits(out, rows_of(clusters.out, vw, first_row, spec.rows))) << "output";
      if (spec.rows == 1)
        EXPECT_TRUE(same_bits(rows_of(dense.normed, vw, first_row, 1), rows_of(clusters.normed, vw, first_row, 1)))
            << "gated norm";
      EXPECT_TRUE(same_bits(dense.states[i], clusters.states[i])) << "state";
      first_row += spec.rows;
    }
  }

  // The control: piece 2 (position 63: its row folds the chunk) with beta one ulp larger in its last head.
  DeltaInputs nudged = in;
  const int32_t row2 = 1 + 7, at = row2 * d.value_heads + d.value_heads - 1;
  nudged.beta[at] = std::nextafter(nudged.beta[at], 2.0f);
  const Result control = run(0, nudged);
  EXPECT_FALSE(same_bits(rows_of(control.out, vw, row2, 1), rows_of(clusters.out, vw, row2, 1)));
  EXPECT_FALSE(same_bits(control.states[2], clusters.states[2]));
  EXPECT_TRUE(same_bits(control.states[0], clusters.states[0]));
}

// The dense kernel's forms under load: 64 one-row pieces, one at every place in a chunk (so up to 4 stages of keys
// ahead of S_b's in the keys' form, and a fold), 2,048 blocks at the 9B's heads. A wrong wait on the ring shows here
// and not with a few pieces: the keys' first form passed the test above and faulted at 64 rows (docs/benchmarks.md,
// 47th round). Every form's outputs, gated norms and states against the default ring's; the control, one row's beta
// one ulp larger, moves that row and no other.
TEST_P(GdnKernelsTest, DenseKernelFormsAgreeAtSixtyFourRows) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const int32_t vw = value_width(d);
  std::vector<PieceSpec> pieces;
  std::vector<uint64_t> seeds;
  for (int32_t i = 0; i < 64; ++i) {
    pieces.push_back({i, 1, 64 * (i % 5) + i});
    seeds.push_back(900 + static_cast<uint64_t>(i));
  }
  const int32_t rows = total_rows(pieces);
  const Weight norm_w(random_bf16_values(static_cast<size_t>(d.value_dim), 903, -1.5f, 1.5f), false, d.value_dim, 1);
  const std::vector<float> z = random_bf16_values(static_cast<size_t>(rows) * vw, 902, -4.0f, 4.0f);
  using Result = NormedStep;
  auto run = [&](int32_t loads, const DeltaInputs& in) {  // three steps on the state each left: more chances to race
    return run_normed_step(d, pieces, seeds, in, z, norm_w, 0, loads, false, 3);
  };
  const DeltaInputs in = random_delta_inputs(d, rows, 901);
  const Result ring = run(kDeltaDenseBulk, in);
  ASSERT_TRUE(all_finite(ring.out));
  for (const int32_t loads : {kDeltaDenseKeys, kDeltaDenseKeysVectorsFirst, 16}) {
    SCOPED_TRACE("loads " + std::to_string(loads));
    const Result form = run(loads, in);
    EXPECT_TRUE(same_bits(form.out, ring.out)) << "outputs";
    EXPECT_TRUE(same_bits(form.normed, ring.normed)) << "gated norms";
    for (size_t i = 0; i < pieces.size(); ++i) EXPECT_TRUE(same_bits(form.states[i], ring.states[i])) << "state " << i;
  }
  // The control: row 50's beta one ulp larger in its last head, under the keys' form.
  DeltaInputs nudged = in;
  const int32_t at = 50 * d.value_heads + d.value_heads - 1;
  nudged.beta[at] = std::nextafter(nudged.beta[at], 2.0f);
  const Result control = run(kDeltaDenseKeys, nudged);
  EXPECT_FALSE(same_bits(rows_of(control.out, vw, 50, 1), rows_of(ring.out, vw, 50, 1)));
  EXPECT_TRUE(same_bits(rows_of(control.out, vw, 49, 1), rows_of(ring.out, vw, 49, 1)));
  EXPECT_FALSE(same_bits(control.states[50], ring.states[50]));
}

// DUET_DELTA_FOLDS=step: the one-row pieces' folds of every layer in one launch after the last layer's delta rule leave
// each layer's state as a fold after each layer does (the dense kernel and the clusters, beside prefill and verify
// pieces). The control: without the folds' launch the completing pieces' states are not those.
TEST_P(GdnKernelsTest, FoldsAfterTheLastLayerLeaveEachLayersState) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const std::vector<PieceSpec> pieces = {{0, 1, 63},  {1, 7, 5},  {2, 1, 191}, {3, 65, 200},
                                         {4, 1, 127}, {5, 1, 40}, {6, 1, 0},   {7, 4, 300, true}};
  const std::vector<uint64_t> seeds = {51, 52, 53, 54, 55, 56, 57, 58};
  const int32_t rows = total_rows(pieces);
  const DeltaInputs in = random_delta_inputs(d, rows, 811);
  enum class Mode { each_layer, after_last_layer, no_folds };
  auto run = [&](Mode mode, int32_t dense_from) {
    set_delta_decode_dense_from_for_tests(dense_from);
    DeviceDeltaInputs in_d(in);
    States states(d, seeds);
    Step step(pieces, states);
    DeviceBuffer<float> out_d(static_cast<size_t>(rows) * value_width(d));
    const DeltaFolds folds = mode == Mode::each_layer ? DeltaFolds::each_layer : DeltaFolds::after_last_layer;
    for (int32_t layer = 0; layer < kLayers; ++layer)
      launch_gdn_delta_rule(step.get(), layer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                            out_d.get(), nullptr, nullptr, folds);
    if (mode == Mode::after_last_layer) launch_gdn_folds(step.get(), kLayers, d, nullptr);
    sync_ok();
    set_delta_decode_dense_from_for_tests(-1);
    std::vector<std::vector<float>> live;  // [layer * pieces + piece]
    const States::Snapshot now = states.now();
    for (int32_t layer = 0; layer < kLayers; ++layer)
      for (size_t i = 0; i < pieces.size(); ++i)
        live.push_back(live_state(d, now.delta(static_cast<int32_t>(i), layer), pieces[i].start + pieces[i].rows));
    return live;
  };
  for (const int32_t dense_from : {0, std::numeric_limits<int32_t>::max()}) {
    SCOPED_TRACE(dense_from == 0 ? "the dense kernel" : "the clusters");
    const auto each = run(Mode::each_layer, dense_from);
    const auto after = run(Mode::after_last_layer, dense_from);
    const auto none = run(Mode::no_folds, dense_from);
    for (int32_t layer = 0; layer < kLayers; ++layer)
      for (size_t i = 0; i < pieces.size(); ++i) {
        SCOPED_TRACE("layer " + std::to_string(layer) + ", piece " + std::to_string(i));
        const size_t at = static_cast<size_t>(layer) * pieces.size() + i;
        EXPECT_TRUE(same_bits(after[at], each[at]));
        const bool folds = pieces[i].rows == 1 && (pieces[i].start + 1) % kDeltaChunk == 0;
        EXPECT_EQ(same_bits(none[at], each[at]), !folds) << "the control";
      }
  }
}

// ---- Row and cut invariance (conv then delta rule, as a GDN layer runs them).

struct GdnRun {
  std::vector<float> conv_out, delta_out, conv_state, delta_state;
};

// Runs conv + delta rule for `specs` on `states`, inputs [rows, ...] already on the device at the given pointers.
void run_gdn(const GdnDims& d, const std::vector<PieceSpec>& specs, const States& states, const Weight& conv_w,
             const bf16* in, const float* beta, const float* g, bf16* conv_out, float* delta_out) {
  Step step(specs, states);
  launch_gdn_conv_silu(step.get(), kLayer, conv_w.get(), conv_channels(d), kConvKernel, in, conv_out, nullptr);
  launch_gdn_delta_rule(step.get(), kLayer, conv_out, beta, g, d, step.scratch(), delta_out, nullptr);
  sync_ok();
}

TEST_P(GdnKernelsTest, PieceGivesTheSameBitsAloneOrBesideOthers) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const int32_t channels = conv_channels(d), vw = value_width(d);
  const Weight conv_w(random_bf16_values(static_cast<size_t>(channels) * kConvKernel, 501), false, channels,
                      kConvKernel);
  // The piece under test: 65 rows of a sequence seeded 7. Beside it, pieces of 7, 64 and 1 rows (`after` covers
  // the last two).
  const int32_t target_rows = 65;
  const DeltaInputs target = random_delta_inputs(d, target_rows, 510);
  const DeltaInputs before = random_delta_inputs(d, 7, 520), after = random_delta_inputs(d, 65, 530);

  auto run = [&](const std::vector<PieceSpec>& specs, const std::vector<uint64_t>& seeds, const DeltaInputs& in,
                 int32_t target_first, int32_t target_sequence) {
    States states(d, seeds);
    const int32_t rows = total_rows(specs);
    DeviceDeltaInputs in_d(in);
    DeviceBuffer<bf16> conv_out(static_cast<size_t>(rows) * channels);
    DeviceBuffer<float> delta_out(static_cast<size_t>(rows) * vw);
    conv_out.poison();
    delta_out.poison();
    run_gdn(d, specs, states, conv_w, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), conv_out.get(), delta_out.get());
    GdnRun result;
    result.conv_out = rows_of(to_float(conv_out.download()), channels, target_first, target_rows);
    result.delta_out = rows_of(delta_out.download(), vw, target_first, target_rows);
    result.conv_state = states.conv_now(target_sequence, kLayer);
    result.delta_state = live_state(d, states.delta_now(target_sequence, kLayer), 200 + target_rows);
    return result;
  };

  const GdnRun alone = run({{0, target_rows, 200}}, {7}, target, 0, 0);
  // Beside others the piece is the second of four (first row 7) and sequence 1 of four.
  DeltaInputs mixed;
  mixed.qkv = concat({before.qkv, target.qkv, after.qkv});
  mixed.beta = concat({before.beta, target.beta, after.beta});
  mixed.g = concat({before.g, target.g, after.g});
  const GdnRun beside = run({{0, 7, 5}, {1, target_rows, 200}, {2, 64, 128}, {3, 1, 37}}, {3, 7, 5, 9}, mixed, 7, 1);
  ASSERT_TRUE(all_finite(alone.conv_out) && all_finite(alone.delta_out)) << "outputs left unwritten";
  EXPECT_TRUE(same_bits(alone.conv_out, beside.conv_out)) << "conv output";
  EXPECT_TRUE(same_bits(alone.delta_out, beside.delta_out)) << "delta-rule output";
  EXPECT_TRUE(same_bits(alone.conv_state, beside.conv_state)) << "conv state";
  EXPECT_TRUE(same_bits(alone.delta_state, beside.delta_state)) << "delta-rule state";
}

// A sequence's rows from `start` run as pieces of `parts` rows, one step each, the state carried between them: prefill
// pieces (the WY form's chunks from a chunk's first row), or verify pieces (`verify`: decode rows, the row-by-row form)
// but for pieces of one row, a decode step's either way.
GdnRun run_cut(const GdnDims& d, const Weight& conv_w, const DeltaInputs& in, int32_t start,
               const std::vector<int32_t>& parts, bool verify) {
  const int32_t channels = conv_channels(d), vw = value_width(d), heads = d.value_heads;
  const auto rows = static_cast<int32_t>(in.beta.size() / heads);
  DeviceDeltaInputs in_d(in);
  States states(d, {21});
  DeviceBuffer<bf16> conv_out(static_cast<size_t>(rows) * channels);
  DeviceBuffer<float> delta_out(static_cast<size_t>(rows) * vw);
  conv_out.poison();
  delta_out.poison();
  int32_t first = 0;
  for (int32_t part : parts) {
    run_gdn(d, {{0, part, start + first, verify}}, states, conv_w, in_d.qkv.get() + first * channels,
            in_d.beta.get() + first * heads, in_d.g.get() + first * heads, conv_out.get() + first * channels,
            delta_out.get() + first * vw);
    first += part;
  }
  return GdnRun{to_float(conv_out.download()), delta_out.download(), states.conv_now(0, kLayer),
                live_state(d, states.delta_now(0, kLayer), start + rows)};
}

Weight random_conv_weight(const GdnDims& d, uint64_t seed) {
  return Weight(random_bf16_values(static_cast<size_t>(conv_channels(d)) * kConvKernel, seed), false, conv_channels(d),
                kConvKernel);
}

void expect_same_run(const GdnRun& whole, const GdnRun& cut) {
  EXPECT_TRUE(same_bits(whole.conv_out, cut.conv_out)) << "conv output";
  EXPECT_TRUE(same_bits(whole.delta_out, cut.delta_out)) << "delta-rule output";
  EXPECT_TRUE(same_bits(whole.conv_state, cut.conv_state)) << "conv state";
  EXPECT_TRUE(same_bits(whole.delta_state, cut.delta_state)) << "delta-rule state";
}

std::string describe(const std::vector<int32_t>& parts) {
  std::string text = "cut into";
  for (int32_t part : parts) {
    text += ' ';
    text += std::to_string(part);
  }
  return text;
}

// The run cut into `whole`, then into each of `cuts`: every one must give its bits. Returns the first.
GdnRun expect_cuts_keep_bits(const GdnDims& d, const Weight& conv_w, const DeltaInputs& in, int32_t start, bool verify,
                             const std::vector<int32_t>& whole_parts, const std::vector<std::vector<int32_t>>& cuts) {
  GdnRun whole = run_cut(d, conv_w, in, start, whole_parts, verify);
  EXPECT_TRUE(all_finite(whole.conv_out) && all_finite(whole.delta_out)) << "outputs left unwritten";
  for (const std::vector<int32_t>& parts : cuts) {
    SCOPED_TRACE(describe(parts));
    expect_same_run(whole, run_cut(d, conv_w, in, start, parts, verify));
  }
  return whole;
}

// Verify rows (the row-by-row form) give the same bits however their run is cut: inside its first chunk, at the chunk
// boundaries 64 and 128, one row at a time across a boundary, a piece of one row (a decode step) in the middle.
TEST_P(GdnKernelsTest, VerifyRowsCutAnywhereGiveTheSameBitsAsWhole) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const Weight conv_w = random_conv_weight(d, 601);
  const DeltaInputs in = random_delta_inputs(d, 130, 610);
  const int32_t start = 40;
  expect_cuts_keep_bits(d, conv_w, in, start, true, {130},
                        {{64, 66}, {1, 63, 66}, {24, 64, 42}, {7, 7, 7, 7, 7, 7, 88}, {20, 1, 1, 1, 1, 1, 105}});
}

// A prompt's rows (the WY form's chunks) give the same bits however it is cut at multiples of 64 (the only cuts the
// scheduler makes, architecture.md's row invariance): 200 rows from position 64, the last chunk partial, then two
// decode rows after each. The control: a cut inside a chunk takes the row-by-row form for the rest of that chunk, whose
// last bits differ (so the comparison can see which form computed a row), by no more than fp32 rounding.
void expect_prompt_cuts_keep_bits(const GdnDims& d) {
  const Weight conv_w = random_conv_weight(d, 651);
  const DeltaInputs in = random_delta_inputs(d, 202, 660);
  const int32_t start = 64;
  const GdnRun whole = expect_cuts_keep_bits(d, conv_w, in, start, false, {200, 1, 1},
                                             {{64, 136, 1, 1}, {128, 72, 1, 1}, {64, 64, 64, 8, 1, 1}});
  const GdnRun inside = run_cut(d, conv_w, in, start, {64, 40, 96, 1, 1}, false);
  const int32_t vw = value_width(d);
  // Rows 0..103 are computed alike; rows 104..127 (the rest of the chunk the cut entered) by the other form.
  EXPECT_TRUE(same_bits(rows_of(whole.delta_out, vw, 0, 104), rows_of(inside.delta_out, vw, 0, 104)));
  const std::vector<float> wy = rows_of(whole.delta_out, vw, 104, 24), by_row = rows_of(inside.delta_out, vw, 104, 24);
  EXPECT_FALSE(same_bits(wy, by_row)) << "the WY form did not take the whole prompt's chunk";
  EXPECT_LT(max_relative_error(by_row, wy), 1e-5);
}

TEST_P(GdnKernelsTest, PromptCutAtMultiplesOf64GivesTheSameBitsAsWhole) {
  DUET_REQUIRE_GPU();
  expect_prompt_cuts_keep_bits(dims());
}

// The same under the walk's tensor-core form (the default; set here so that the test keeps it): its WY chunks' bits
// depend on the chunk alone, whatever the cuts.
TEST_P(GdnKernelsTest, TensorCoreWalkKeepsPromptCutsBits) {
  DUET_REQUIRE_GPU();
  set_delta_walk_mma_for_tests(3);
  expect_prompt_cuts_keep_bits(dims());
  set_delta_walk_mma_for_tests(-1);
}

// A step of kWalkPieces under one of the walk's forms: its outputs and every sequence's live state after it.
struct WalkForm {
  int32_t tiles = 0, wide = 0, split = 0, mma = 0, norm_batch = 0, bulk = 0;
};
struct WalkResult {
  std::vector<float> out;
  std::vector<std::vector<float>> states;
};
// Prefill pieces from a chunk's start (WY chunks), entering a chunk in its middle (the row-by-row form; piece 5 also
// completes it, with no WY chunk after) and ending inside one, beside a one-row piece.
const std::vector<PieceSpec> kWalkPieces = {{0, 200, 0}, {1, 65, 200}, {2, 30, 37},
                                            {3, 1, 63},  {4, 130, 64}, {5, 27, 101}};

WalkResult run_walk_form(const GdnDims& d, const WalkForm& form, const DeltaInputs& in) {
  const std::vector<uint64_t> seeds = {41, 42, 43, 44, 45, 46};
  set_delta_walk_tiles_for_tests(form.tiles);
  set_delta_walk_wide_for_tests(form.wide);
  set_delta_walk_split_for_tests(form.split);
  set_delta_walk_mma_for_tests(form.mma);
  set_delta_norm_batch_for_tests(form.norm_batch);
  set_delta_walk_bulk_for_tests(form.bulk);
  DeviceDeltaInputs in_d(in);
  States states(d, seeds);
  Step step(kWalkPieces, states);
  DeviceBuffer<float> out_d(static_cast<size_t>(total_rows(kWalkPieces)) * value_width(d));
  out_d.poison();
  launch_gdn_delta_rule(step.get(), kLayer, in_d.qkv.get(), in_d.beta.get(), in_d.g.get(), d, step.scratch(),
                        out_d.get(), nullptr);
  sync_ok();
  set_delta_walk_tiles_for_tests(-1);
  set_delta_walk_wide_for_tests(-1);
  set_delta_walk_split_for_tests(-1);
  set_delta_walk_mma_for_tests(-1);
  set_delta_norm_batch_for_tests(-1);
  set_delta_walk_bulk_for_tests(-1);
  WalkResult r{out_d.download(), {}};
  const States::Snapshot now = states.now();
  for (size_t i = 0; i < kWalkPieces.size(); ++i)
    r.states.push_back(
        live_state(d, now.delta(static_cast<int32_t>(i), kLayer), kWalkPieces[i].start + kWalkPieces[i].rows));
  return r;
}

// Every piece's outputs and state in `form` bit for bit those of `reference`.
void expect_same_walk(const GdnDims& d, const WalkResult& form, const WalkResult& reference) {
  const int32_t vw = value_width(d);
  ASSERT_TRUE(all_finite(form.out)) << "outputs left unwritten";
  int32_t first_row = 0;
  for (size_t i = 0; i < kWalkPieces.size(); ++i) {
    SCOPED_TRACE("piece " + std::to_string(i));
    EXPECT_TRUE(same_bits(rows_of(form.out, vw, first_row, kWalkPieces[i].rows),
                          rows_of(reference.out, vw, first_row, kWalkPieces[i].rows)))
        << "output";
    EXPECT_TRUE(same_bits(form.states[i], reference.states[i])) << "state";
    first_row += kWalkPieces[i].rows;
  }
}

// The walk tests' control: `form` with beta one ulp larger in row 10 (the first piece's) moves that piece's later
// outputs and no other piece's, against `reference` on the unchanged inputs.
void expect_walk_control(const GdnDims& d, const WalkForm& form, DeltaInputs in, const WalkResult& reference) {
  const int32_t vw = value_width(d), rows = total_rows(kWalkPieces);
  const int32_t at = 10 * d.value_heads + d.value_heads - 1;
  in.beta[at] = std::nextafter(in.beta[at], 2.0f);
  const WalkResult control = run_walk_form(d, form, in);
  EXPECT_FALSE(same_bits(rows_of(control.out, vw, 10, 190), rows_of(reference.out, vw, 10, 190)));
  EXPECT_TRUE(same_bits(rows_of(control.out, vw, 200, rows - 200), rows_of(reference.out, vw, 200, rows - 200)));
}

// `form` (a same-bits variant of the tensor-core walk, the default form) against that walk on random inputs of `seed`:
// outputs and states bit for bit, and the control.
void expect_walk_form_keeps_bits(const GdnDims& d, const WalkForm& form, uint64_t seed) {
  const DeltaInputs in = random_delta_inputs(d, total_rows(kWalkPieces), seed);
  const WalkResult reference = run_walk_form(d, WalkForm{1, 1, 0, 3}, in);
  expect_same_walk(d, run_walk_form(d, form, in), reference);
  expect_walk_control(d, form, in, reference);
}

// The chunked walk's forms, its outputs in tiles (walk_outputs_in_tiles, the default), its wide form (the default
// too; with and without the tiles) and the wide form's split form (DUET_DELTA_WALK_SPLIT=1: the fold in 4 x 4 tiles
// beside the outputs, a WY chunk's right side written with S_b^T k), give the narrow one-column-a-lane form's bits:
// outputs and every sequence's state, over kWalkPieces. The control: beta one ulp larger in one row of the first piece
// changes its later outputs and no other piece's.
TEST_P(GdnKernelsTest, WalkFormsKeepEveryBit) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const DeltaInputs in = random_delta_inputs(d, total_rows(kWalkPieces), 901);
  const WalkResult lanes = run_walk_form(d, WalkForm{}, in);
  for (const WalkForm& f : std::vector<WalkForm>{{1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 1, 1}}) {
    SCOPED_TRACE(std::string(f.tiles ? "tiles" : "lanes") + (f.wide ? ", wide" : "") + (f.split ? ", split" : ""));
    expect_same_walk(d, run_walk_form(d, f, in), lanes);
  }
  expect_walk_control(d, WalkForm{1, 1, 1}, in, lanes);
}

// DUET_DELTA_NORM_BATCH=1: a chunk's new keys and queries normalized eight vectors a warp at once (l2_normalize_rows,
// in the Gram kernel and the tensor-core walk) give the one-at-a-time form's bits: outputs and every sequence's state
// over kWalkPieces (WY chunks, chunks entered in their middle, a one-row piece). The control: beta one ulp larger in
// row 10 moves the first piece's later outputs and no other piece's.
TEST_P(GdnKernelsTest, BatchedNormalizingKeepsTheWalksBits) {
  DUET_REQUIRE_GPU();
  expect_walk_form_keeps_bits(dims(), WalkForm{1, 1, 0, 3, 1}, 911);
}

// DUET_DELTA_WALK_BULK=1: the tensor-core walk's rows of q, k, v, A and Q by bulk copies give the cp.async form's bits,
// outputs and every state over kWalkPieces (WY chunks, partial chunks whose rows of A and Q are not whole 16-byte
// pieces, chunks entered in their middle, a one-row piece); the control as above. The pieces' chunks walk through
// both slots' barriers several times (piece 0: four chunks, piece 4: three), so a wrong phase shows.
TEST_P(GdnKernelsTest, BulkInputsKeepTheWalksBits) {
  DUET_REQUIRE_GPU();
  expect_walk_form_keeps_bits(dims(), WalkForm{1, 1, 0, 3, 0, 1}, 913);
}

// The walk's tensor-core form takes a prompt's WY chunks and nothing else: over kWalkPieces, the rows of chunks entered
// in their middle (piece 1's first 56 rows, piece 2's first 27, piece 5) and the one-row piece keep the FMA form's
// bits, and so do the states of pieces 3 and 5 (piece 5's chunk folded by the FMA form's fold), while every WY chunk's
// rows have other bits (so the tensor cores computed them), within fp32 rounding.
TEST_P(GdnKernelsTest, TensorCoreWalkTakesOnlyWyChunks) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const int32_t vw = value_width(d);
  const DeltaInputs in = random_delta_inputs(d, total_rows(kWalkPieces), 911);
  const WalkResult fma = run_walk_form(d, WalkForm{1, 1, 0, 0}, in);
  const WalkResult mma = run_walk_form(d, WalkForm{1, 1, 0, 3}, in);
  ASSERT_TRUE(all_finite(mma.out)) << "outputs left unwritten";
  struct Rows {
    int32_t first, count;
    bool wy;
  };
  // Rows of the step: piece 0 (0..199, WY), piece 1 (200..255 entered at 200, then 256..264 WY), piece 2 (265..291
  // entered at 37, then 292..294 WY), piece 3 (295, one row), piece 4 (296..425, WY), piece 5 (426..452, entered at
  // 101 and completed).
  for (const Rows& r : std::vector<Rows>{{0, 200, true},
                                         {200, 56, false},
                                         {256, 9, true},
                                         {265, 27, false},
                                         {292, 3, true},
                                         {295, 1, false},
                                         {296, 130, true},
                                         {426, 27, false}}) {
    SCOPED_TRACE("rows " + std::to_string(r.first) + ".." + std::to_string(r.first + r.count - 1));
    const std::vector<float> got = rows_of(mma.out, vw, r.first, r.count);
    const std::vector<float> want = rows_of(fma.out, vw, r.first, r.count);
    EXPECT_EQ(same_bits(got, want), !r.wy);
    EXPECT_LT(max_relative_error(got, want), kDeltaRuleBar);
  }
  EXPECT_TRUE(same_bits(mma.states[3], fma.states[3])) << "the one-row piece";
  EXPECT_TRUE(same_bits(mma.states[5], fma.states[5])) << "a chunk entered in its middle and completed";
  for (int i : {0, 1, 2, 4}) EXPECT_LT(max_relative_error(mma.states[i], fma.states[i]), kDeltaRuleBar);
}

// The kernels exist for the two shapes above only; the backend refuses any other when a model's state is planned (its
// bytes, its storage), not at a step. The answer of gdn_delta_rule_supports needs no GPU; the backend's refusal does.
// Control: the two shapes with kernels are planned.
TEST(GdnDeltaRuleShapes, OnlyTheCompiledShapesArePlanned) {
  EXPECT_TRUE(gdn_delta_rule_supports(16, 32));
  EXPECT_TRUE(gdn_delta_rule_supports(128, 128));
  EXPECT_FALSE(gdn_delta_rule_supports(64, 64));
  EXPECT_FALSE(gdn_delta_rule_supports(128, 64));
  EXPECT_FALSE(gdn_delta_rule_supports(32, 16));
  DUET_REQUIRE_GPU();
  const std::unique_ptr<Backend> backend = make_cuda_backend();
  GdnShape shape{.hidden = 256, .key_heads = 2, .value_heads = 4, .key_dim = 64, .value_dim = 64, .conv_kernel = 4};
  try {
    backend->gdn_state_bytes(shape);
    ADD_FAILURE() << "a 64 x 64 head was planned";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("key_dim 64 x value_dim 64"), std::string::npos) << e.what();
  }
  for (const Shape& planned : {kTiny, kQwen9B}) {
    shape.key_dim = planned.dims.key_dim, shape.value_dim = planned.dims.value_dim;
    EXPECT_GT(backend->gdn_state_bytes(shape), 0u) << planned.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdnKernelsTest, ::testing::Values(kTiny, kQwen9B),
                         [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace duet::backend::cuda
