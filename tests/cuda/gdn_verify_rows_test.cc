// Verify pieces (a few decode rows of one sequence: the last token and its drafts, docs/mtp.md) through the GDN decode
// kernels a row at a time (gdn_conv.cu's conv_decode_kernel, gdn_delta_rule.cu's decode_rows_kernel, the gated norm
// fused) against the chunked form they replace (DUET_VERIFY_ROWS=chunked: the conv's two kernels, the delta rule's
// three, the gated norm on its own) and against the same rows run as one-row decode steps (plain decoding): conv
// outputs, gates, delta-rule outputs, gated-norm outputs, the conv history, the delta-rule state and the conv window
// for rewinding, byte for byte, for pieces of 2..8 rows at places across a chunk. A planted control (one row given the
// row before's gates) must differ.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/delta_chunks.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "gdn_test_steps.h"

namespace duet::backend::cuda {
namespace {

using namespace ::duet::backend::cuda::gdn_testing;  // NOLINT: the steps and states of every test here
using ::duet::testing::DeviceBuffer;
using ::duet::testing::random_bf16_values;
using ::duet::testing::same_bits;
using ::duet::testing::to_bf16;
using ::duet::testing::to_float;

// A GDN layer's weights for the conv, gates and gated norm, and one step's inputs for `rows` rows (from the in_proj:
// the conv's input, b and a for the gates, z for the norm), on the device.
struct Layer {
  Layer(const GdnDims& d, uint64_t seed)
      : conv_w(to_bf16(random_bf16_values(static_cast<size_t>(conv_channels(d)) * kConvKernel, seed, -0.6f, 0.6f))),
        a_log(random_bf16_values(static_cast<size_t>(d.value_heads), seed + 1, -2.0f, 1.0f)),
        dt_bias(to_bf16(random_bf16_values(static_cast<size_t>(d.value_heads), seed + 2, -1.0f, 1.0f))),
        norm_w(to_bf16(random_bf16_values(static_cast<size_t>(d.value_dim), seed + 3, -1.5f, 1.5f))) {}
  DeviceWeight conv() const { return weight(conv_w.get(), false, conv_w.size() / kConvKernel, kConvKernel); }
  DeviceWeight A_log() const { return weight(a_log.get(), true, a_log.size(), 1); }
  DeviceWeight bias() const { return weight(dt_bias.get(), false, dt_bias.size(), 1); }
  DeviceWeight norm() const { return weight(norm_w.get(), false, norm_w.size(), 1); }
  static DeviceWeight weight(const void* data, bool f32, size_t rows, int64_t cols) {
    DeviceWeight w;
    w.data = data;
    w.f32 = f32;
    w.rows = static_cast<int64_t>(rows);
    w.cols = cols;
    return w;
  }
  DeviceBuffer<bf16> conv_w;
  DeviceBuffer<float> a_log;  // f32, as the stock releases store A_log
  DeviceBuffer<bf16> dt_bias, norm_w;
};

struct Inputs {
  Inputs(const GdnDims& d, int32_t rows, uint64_t seed)
      : x(to_bf16(random_bf16_values(static_cast<size_t>(rows) * conv_channels(d), seed))),
        b(to_bf16(random_bf16_values(static_cast<size_t>(rows) * d.value_heads, seed + 1, -4.0f, 4.0f))),
        a(to_bf16(random_bf16_values(static_cast<size_t>(rows) * d.value_heads, seed + 2, -4.0f, 4.0f))),
        z(to_bf16(random_bf16_values(static_cast<size_t>(rows) * value_width(d), seed + 3, -4.0f, 4.0f))) {}
  DeviceBuffer<bf16> x, b, a, z;
};

// What one GDN layer leaves: every row's outputs (conv, gates, delta rule, gated norm) and, per piece, the state of
// layer kLayer (conv history, delta rule) and its conv window; layer 0 must stay as it was.
struct Result {
  std::vector<float> conv_out, beta, g, delta_out, normed;
  std::vector<std::vector<float>> conv_state, delta_state, window;
  bool layer0_untouched = true;
  int32_t multi_pieces = 0, few_pieces = 0;
};

// How a step is run: the rows through the decode kernels (up to kDecodePieceRows a piece) or in the chunked form
// (decode_rows 1); `planted_row` >= 1 gets the gates (beta, g) of the row before it in the step (the control).
struct How {
  int32_t decode_rows = kDecodePieceRows;
  int32_t planted_row = -1;
};

// One step of `specs` (sequence i seeded seeds[i]) as CudaBackend::gdn_mixer runs a GDN layer from its projections:
// conv with the gates beside it, the delta rule with the decode rows' gated norm, the gated norm of every row when the
// chunked form took a piece. `in` holds the step's rows from `first_row` on.
Result run_step(const GdnDims& d, const Layer& w, const std::vector<PieceSpec>& specs,
                const std::vector<uint64_t>& seeds, const Inputs& in, int32_t first_row, const How& how) {
  States states(d, seeds);
  const int32_t rows = total_rows(specs), C = conv_channels(d), vh = d.value_heads, vw = value_width(d);
  std::vector<std::unique_ptr<DeviceBuffer<bf16>>> windows;  // (DeviceBuffer does not move)
  StepOptions options;
  options.decode_rows = how.decode_rows;
  for (const PieceSpec& spec : specs) {
    const int64_t stride = static_cast<int64_t>(kHistory + spec.rows) * C;
    windows.push_back(std::make_unique<DeviceBuffer<bf16>>(static_cast<size_t>(kLayers * stride)));
    windows.back()->poison();
    options.rewind.push_back({windows.back()->get(), stride});
  }
  Step step(specs, states, options);
  DeviceBuffer<bf16> conv_out(static_cast<size_t>(rows) * C), normed(static_cast<size_t>(rows) * vw);
  DeviceBuffer<float> beta(static_cast<size_t>(rows) * vh), g(static_cast<size_t>(rows) * vh);
  DeviceBuffer<float> delta_out(static_cast<size_t>(rows) * vw);
  for (auto* buffer : {&conv_out, &normed}) buffer->poison();
  for (auto* buffer : {&beta, &g, &delta_out}) buffer->poison();
  const GdnGateArrays gates{
      in.b.get() + first_row * vh, in.a.get() + first_row * vh, w.A_log(), w.bias(), vh, beta.get(), g.get()};
  launch_gdn_conv_silu(step.get(), kLayer, w.conv(), C, kConvKernel, in.x.get() + first_row * C, conv_out.get(),
                       nullptr, &gates);
  if (how.planted_row >= 1) {  // the control: this row's gates are the row before's
    for (float* gate : {beta.get(), g.get()})
      cudaMemcpy(gate + how.planted_row * vh, gate + (how.planted_row - 1) * vh, vh * sizeof(float),
                 cudaMemcpyDeviceToDevice);
  }
  const GdnNormArrays norm{in.z.get() + first_row * vw, w.norm(), kNormEps, normed.get()};
  launch_gdn_delta_rule(step.get(), kLayer, conv_out.get(), beta.get(), g.get(), d, step.scratch(), delta_out.get(),
                        nullptr, &norm);
  if (step.get().multi_pieces > 0)  // as gdn_mixer: the fused norm covers the decode kernels' rows only
    launch_gdn_gated_norm(delta_out.get(), in.z.get() + first_row * vw, w.norm(), kNormEps, rows, vh, d.value_dim,
                          normed.get(), nullptr);
  sync_ok();
  Result r;
  r.conv_out = to_float(conv_out.download());
  r.beta = beta.download();
  r.g = g.download();
  r.delta_out = delta_out.download();
  r.normed = to_float(normed.download());
  const States::Snapshot now = states.now();
  for (size_t i = 0; i < specs.size(); ++i) {
    const PieceSpec& spec = specs[i];
    r.conv_state.push_back(now.conv(spec.sequence, kLayer));
    r.delta_state.push_back(now.delta(spec.sequence, kLayer));
    const std::vector<float> window = to_float(windows[i]->download());
    r.window.push_back(rows_of(window, C, kLayer * (kHistory + spec.rows), kHistory + spec.rows));
    r.layer0_untouched = r.layer0_untouched && now.conv(spec.sequence, 0) == states.initial_conv(spec.sequence, 0) &&
                         now.delta(spec.sequence, 0) == states.initial_delta(spec.sequence, 0);
  }
  r.multi_pieces = step.get().multi_pieces;
  r.few_pieces = step.get().few_pieces;
  return r;
}

// The same rows of one sequence as `rows` one-row decode steps in a row (plain decoding), the state carried.
Result run_one_row_steps(const GdnDims& d, const Layer& w, int32_t rows, int32_t start, uint64_t seed,
                         const Inputs& in) {
  States states(d, {seed});
  const int32_t C = conv_channels(d), vh = d.value_heads, vw = value_width(d);
  DeviceBuffer<bf16> conv_out(static_cast<size_t>(rows) * C), normed(static_cast<size_t>(rows) * vw);
  DeviceBuffer<float> beta(static_cast<size_t>(rows) * vh), g(static_cast<size_t>(rows) * vh);
  DeviceBuffer<float> delta_out(static_cast<size_t>(rows) * vw);
  for (int32_t t = 0; t < rows; ++t) {
    Step step({{0, 1, start + t}}, states);
    const GdnGateArrays gates{in.b.get() + t * vh, in.a.get() + t * vh, w.A_log(), w.bias(), vh,
                              beta.get() + t * vh, g.get() + t * vh};
    launch_gdn_conv_silu(step.get(), kLayer, w.conv(), C, kConvKernel, in.x.get() + t * C, conv_out.get() + t * C,
                         nullptr, &gates);
    const GdnNormArrays norm{in.z.get() + t * vw, w.norm(), kNormEps, normed.get() + t * vw};
    launch_gdn_delta_rule(step.get(), kLayer, conv_out.get() + t * C, beta.get() + t * vh, g.get() + t * vh, d,
                          step.scratch(), delta_out.get() + t * vw, nullptr, &norm);
    sync_ok();
  }
  Result r;
  r.conv_out = to_float(conv_out.download());
  r.beta = beta.download();
  r.g = g.download();
  r.delta_out = delta_out.download();
  r.normed = to_float(normed.download());
  r.conv_state.push_back(states.conv_now(0, kLayer));
  r.delta_state.push_back(states.delta_now(0, kLayer));
  return r;
}

// Everything `a` and `b` computed for `rows` rows from their rows a_first / b_first, and the states of their pieces
// a_piece / b_piece, byte for byte; with `window`, the conv windows too. The delta-rule state is compared whole when
// both ran the piece as one step, and as what it holds (live_state) against one-row steps.
void expect_same(const GdnDims& d, const Result& a, int32_t a_first, size_t a_piece, const Result& b, int32_t b_first,
                 size_t b_piece, int32_t rows, int32_t end_position, bool whole_state, bool window) {
  const int32_t C = conv_channels(d), vh = d.value_heads, vw = value_width(d);
  auto both = [&](const std::vector<float>& x, const std::vector<float>& y, int64_t width, const char* what) {
    const std::vector<float> xs = rows_of(x, width, a_first, rows), ys = rows_of(y, width, b_first, rows);
    EXPECT_TRUE(all_finite(xs) && all_finite(ys)) << what << ": left unwritten";
    EXPECT_TRUE(same_bits(xs, ys)) << what;
  };
  both(a.conv_out, b.conv_out, C, "conv output");
  both(a.beta, b.beta, vh, "beta");
  both(a.g, b.g, vh, "g");
  both(a.delta_out, b.delta_out, vw, "delta-rule output");
  both(a.normed, b.normed, vw, "gated-norm output");
  EXPECT_TRUE(same_bits(a.conv_state[a_piece], b.conv_state[b_piece])) << "conv history";
  if (whole_state) {
    EXPECT_TRUE(same_bits(a.delta_state[a_piece], b.delta_state[b_piece])) << "delta-rule state, every byte";
  }
  EXPECT_TRUE(same_bits(live_state(d, a.delta_state[a_piece], end_position),
                        live_state(d, b.delta_state[b_piece], end_position)))
      << "delta-rule state";
  if (window) {
    EXPECT_TRUE(all_finite(a.window[a_piece])) << "conv window left unwritten";
    EXPECT_TRUE(same_bits(a.window[a_piece], b.window[b_piece])) << "conv window";
  }
}

class GdnVerifyRowsTest : public ::testing::TestWithParam<Shape> {
 protected:
  const GdnDims& dims() const { return GetParam().dims; }
};

// Pieces of 2..8 rows starting at every kind of place in a chunk: its first row, just after it, the middle, ending
// just before position 63 mod 64 (the last a verify piece may reach), the last row completing the chunk (the fold: a
// piece the engine does not verify, but a short prefill piece may end there), and row 0 completing it (two chunks:
// the chunked form in both runs). In the first chunk and in a later one.
TEST_P(GdnVerifyRowsTest, DecodeRowsHaveTheChunkedFormsAndOneRowStepsBits) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const Layer w(d, 901);
  int32_t few_runs = 0, folds = 0;
  for (int32_t rows : {2, 3, 4, 5, 8})
    for (int32_t chunk_start : {0, 192})
      for (int32_t filled : {0, 1, 29, 62 - rows, kDeltaChunk - rows, kDeltaChunk - 1}) {
        const int32_t start = chunk_start + filled, end = start + rows;
        SCOPED_TRACE(std::to_string(rows) + " rows from position " + std::to_string(start));
        const Inputs in(d, rows, 910 + static_cast<uint64_t>(start) * 16 + rows);
        const uint64_t seed = 77 + static_cast<uint64_t>(start);
        const Result chunked = run_step(d, w, {{0, rows, start, true}}, {seed}, in, 0, How{1});
        const Result decode = run_step(d, w, {{0, rows, start, true}}, {seed}, in, 0, How{});
        const Result steps = run_one_row_steps(d, w, rows, start, seed, in);
        const bool one_chunk = filled + rows <= kDeltaChunk;
        EXPECT_EQ(chunked.multi_pieces, 1);
        EXPECT_EQ(chunked.few_pieces, 0);
        EXPECT_EQ(decode.few_pieces, one_chunk ? 1 : 0) << "which kernels took the piece";
        EXPECT_TRUE(chunked.layer0_untouched && decode.layer0_untouched) << "layer 0 was touched";
        few_runs += decode.few_pieces;
        folds += one_chunk && end % kDeltaChunk == 0 ? 1 : 0;
        expect_same(d, decode, 0, 0, chunked, 0, 0, rows, end, true, true);
        expect_same(d, decode, 0, 0, steps, 0, 0, rows, end, false, false);
      }
  EXPECT_GT(few_runs, 40);
  EXPECT_GT(folds, 4);
}

// A verify piece beside others in one step (a prefill piece for the chunked form, one-row pieces, another verify piece
// of another length): each class of kernel finds its own pieces (DeviceStep::piece_order), and the piece's bits are
// those it has alone in the chunked form.
TEST_P(GdnVerifyRowsTest, DecodeRowsBesideOtherPiecesHaveTheirBitsAlone) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const Layer w(d, 921);
  // Sequences: 0 prefill 70 rows from 10; 1 the verify piece, 4 rows from 137; 2 one row at 63; 3 three rows from
  // 200; 4 one row at 5.
  const std::vector<PieceSpec> specs = {{0, 70, 10}, {1, 4, 137, true}, {2, 1, 63}, {3, 3, 200, true}, {4, 1, 5}};
  const std::vector<uint64_t> seeds = {31, 32, 33, 34, 35};
  const Inputs in(d, total_rows(specs), 930);
  const Result mixed = run_step(d, w, specs, seeds, in, 0, How{});
  EXPECT_EQ(mixed.multi_pieces, 1);
  EXPECT_EQ(mixed.few_pieces, 2);
  int32_t first_row = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const PieceSpec& spec = specs[i];
    SCOPED_TRACE("piece " + std::to_string(i));
    const Result alone = run_step(d, w, {{0, spec.rows, spec.start, spec.verify}}, {seeds[i]}, in, first_row, How{1});
    expect_same(d, mixed, first_row, i, alone, 0, 0, spec.rows, spec.start + spec.rows, true, true);
    first_row += spec.rows;
  }
}

// The control: a row of the piece given the row before's gates (beta, g) in the decode kernels must change the
// delta-rule outputs and state against the chunked form's, or the comparisons above could not see such a fault.
TEST_P(GdnVerifyRowsTest, RowWithThePreviousRowsGatesDiffers) {
  DUET_REQUIRE_GPU();
  const GdnDims& d = dims();
  const Layer w(d, 941);
  const int32_t rows = 4, start = 128 + 30;
  const Inputs in(d, rows, 950);
  const Result chunked = run_step(d, w, {{0, rows, start, true}}, {51}, in, 0, How{1});
  const Result planted = run_step(d, w, {{0, rows, start, true}}, {51}, in, 0, How{kDecodePieceRows, 2});
  const int32_t vw = value_width(d);
  EXPECT_EQ(planted.few_pieces, 1);
  // Rows before the planted one are untouched; it and the rows after it differ.
  EXPECT_TRUE(same_bits(rows_of(planted.delta_out, vw, 0, 2), rows_of(chunked.delta_out, vw, 0, 2)));
  EXPECT_FALSE(same_bits(rows_of(planted.delta_out, vw, 2, 1), rows_of(chunked.delta_out, vw, 2, 1)));
  EXPECT_FALSE(same_bits(rows_of(planted.delta_out, vw, 3, 1), rows_of(chunked.delta_out, vw, 3, 1)));
  EXPECT_FALSE(same_bits(planted.delta_state[0], chunked.delta_state[0]));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdnVerifyRowsTest, ::testing::Values(kTiny, kQwen9B),
                         [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace duet::backend::cuda
