#pragma once
// GDN steps and states on the device for the GPU tests and the delta-rule bench: sequences' conv and delta-rule
// states seeded per sequence, and DeviceSteps built from pieces as CudaBackend::begin_step builds them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/delta_chunks.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

namespace duet::backend::cuda::gdn_testing {

using ::duet::testing::DeviceBuffer;
using ::duet::testing::random_bf16_values;
using ::duet::testing::to_bf16;
using ::duet::testing::to_float;

constexpr int32_t kConvKernel = 4;
constexpr int32_t kHistory = kConvKernel - 1;
// Every sequence's state holds two GDN layers and the tests run layer 1, so a kernel ignoring the layer stride fails.
constexpr int32_t kLayers = 2;
constexpr int32_t kLayer = 1;

inline int32_t conv_channels(const GdnDims& d) { return 2 * d.key_heads * d.key_dim + d.value_heads * d.value_dim; }
inline int32_t value_width(const GdnDims& d) { return d.value_heads * d.value_dim; }
inline DeltaHeadState delta_head(const GdnDims& d) { return DeltaHeadState{d.key_dim, d.value_dim}; }
inline int64_t delta_elems(const GdnDims& d) { return d.value_heads * delta_head(d).elems(); }

// ---- Steps and states on the device.

// A piece of a test step: `rows` rows of sequence `sequence` (an index into States), from sequence position `start`.
// Its role: a piece of one row is a decode step's, one of several a prefill piece's (the WY form's chunks,
// delta_chunks.h) unless `verify` (a draft's verify piece, decode rows: the row-by-row form's).
struct PieceSpec {
  int32_t sequence;
  int32_t rows;
  int32_t start;
  bool verify = false;
};

inline int32_t total_rows(const std::vector<PieceSpec>& specs) {
  int32_t rows = 0;
  for (const auto& spec : specs) rows += spec.rows;
  return rows;
}

// The GDN states (kLayers layers each) of several sequences on the device. Each sequence's initial values come from
// its own seed, so a sequence starts the same whichever other sequences exist.
class States {
 public:
  States(const GdnDims& dims, const std::vector<uint64_t>& seeds)
      : value_heads_(dims.value_heads),
        conv_layer_(static_cast<int64_t>(kHistory) * conv_channels(dims)),
        delta_layer_(delta_elems(dims)),
        conv_host_(initial(seeds, kLayers * conv_layer_, 0)),
        delta_host_(initial(seeds, kLayers * delta_layer_, 1)),
        conv_(to_bf16(conv_host_)),
        delta_(delta_host_) {}

  int32_t value_heads() const { return value_heads_; }
  int64_t conv_layer_elems() const { return conv_layer_; }
  int64_t delta_layer_elems() const { return delta_layer_; }
  bf16* conv(int32_t sequence) const { return conv_.get() + sequence * kLayers * conv_layer_; }
  float* delta(int32_t sequence) const { return delta_.get() + sequence * kLayers * delta_layer_; }

  // Layer `layer` of a sequence's state: as it was created, and as it is on the device now.
  std::vector<float> initial_conv(int32_t sequence, int32_t layer) const {
    return slice(conv_host_, (sequence * kLayers + layer) * conv_layer_, conv_layer_);
  }
  std::vector<float> initial_delta(int32_t sequence, int32_t layer) const {
    return slice(delta_host_, (sequence * kLayers + layer) * delta_layer_, delta_layer_);
  }
  std::vector<float> conv_now(int32_t sequence, int32_t layer) const {
    return slice(to_float(conv_.download()), (sequence * kLayers + layer) * conv_layer_, conv_layer_);
  }
  std::vector<float> delta_now(int32_t sequence, int32_t layer) const {
    return slice(delta_.download(), (sequence * kLayers + layer) * delta_layer_, delta_layer_);
  }
  // Every sequence's layers as they are on the device now, from one download of each array: conv_now and delta_now
  // download every sequence's layers for one, which for each of 64 sequences at the 9B shape moved 17 GB.
  class Snapshot {
   public:
    Snapshot(std::vector<float> conv, std::vector<float> delta, int64_t conv_layer, int64_t delta_layer)
        : conv_(std::move(conv)), delta_(std::move(delta)), conv_layer_(conv_layer), delta_layer_(delta_layer) {}
    std::vector<float> conv(int32_t sequence, int32_t layer) const {
      return slice(conv_, (sequence * kLayers + layer) * conv_layer_, conv_layer_);
    }
    std::vector<float> delta(int32_t sequence, int32_t layer) const {
      return slice(delta_, (sequence * kLayers + layer) * delta_layer_, delta_layer_);
    }

   private:
    std::vector<float> conv_, delta_;
    int64_t conv_layer_, delta_layer_;
  };
  Snapshot now() const { return Snapshot(to_float(conv_.download()), delta_.download(), conv_layer_, delta_layer_); }

 private:
  static std::vector<float> initial(const std::vector<uint64_t>& seeds, int64_t per_sequence, uint64_t salt) {
    std::vector<float> all;
    for (uint64_t seed : seeds) {
      // Non-zero history and state: a kernel that starts from zeros fails.
      std::vector<float> one = random_bf16_values(static_cast<size_t>(per_sequence), seed * 2 + salt, -0.5f, 0.5f);
      all.insert(all.end(), one.begin(), one.end());
    }
    return all;
  }
  static std::vector<float> slice(const std::vector<float>& v, int64_t first, int64_t count) {
    return std::vector<float>(v.begin() + first, v.begin() + first + count);
  }

  int32_t value_heads_;
  int64_t conv_layer_, delta_layer_;
  std::vector<float> conv_host_, delta_host_;
  DeviceBuffer<bf16> conv_;
  DeviceBuffer<float> delta_;
};

// The host-side arrays of a DeviceStep: pieces back to back from row 0.
struct HostStep {
  std::vector<DevicePiece> pieces;
  std::vector<int32_t> row_piece, row_position;
  std::vector<DeviceChunk> chunks;
  int64_t chunk_scratch = 0;
  DeltaOrder order;
};

// How a test step is planned, beyond its pieces: the most rows of a piece the GDN decode kernels take (delta_chunks.h;
// 1: every piece of several rows in the chunked form, as DUET_VERIFY_ROWS=chunked), and per piece a conv window for
// rewinding (DevicePiece::rewind_conv and its layer stride; none when empty or null).
struct StepOptions {
  int32_t decode_rows = kDecodePieceRows;
  std::vector<std::pair<bf16*, int64_t>> rewind;
  bool longest_first = one_row_longest_first();  // delta_order's order of the one-row pieces
};

inline HostStep build_host_step(const std::vector<PieceSpec>& specs, const States& states,
                                const StepOptions& options = {}) {
  HostStep host;
  int32_t row = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const PieceSpec& spec = specs[i];
    DevicePiece piece;
    piece.first_row = row;
    piece.rows = spec.rows;
    piece.start_position = spec.start;
    piece.role = spec.rows == 1 || spec.verify ? DeviceRole::decode : DeviceRole::prefill;
    piece.conv = states.conv(spec.sequence);
    piece.delta = states.delta(spec.sequence);
    piece.conv_layer_stride = states.conv_layer_elems();
    piece.delta_layer_stride = states.delta_layer_elems();
    if (i < options.rewind.size()) std::tie(piece.rewind_conv, piece.rewind_layer_stride) = options.rewind[i];
    host.pieces.push_back(piece);
    for (int32_t t = 0; t < spec.rows; ++t) {
      host.row_piece.push_back(static_cast<int32_t>(i));
      host.row_position.push_back(spec.start + t);
    }
    row += spec.rows;
  }
  host.chunks = plan_delta_chunks(host.pieces, &host.chunk_scratch);
  host.order = delta_order(host.pieces, options.decode_rows, options.longest_first);
  return host;
}

// A DeviceStep whose arrays live on the device, as CudaBackend::begin_step builds it, with its chunk scratch.
class Step {
 public:
  Step(const std::vector<PieceSpec>& specs, const States& states, const StepOptions& options = {})
      : host_(build_host_step(specs, states, options)),
        pieces_(host_.pieces),
        row_piece_(host_.row_piece),
        row_position_(host_.row_position),
        chunks_(host_.chunks),
        piece_order_(host_.order.pieces),
        chunk_order_(host_.order.chunks),
        scratch_(static_cast<size_t>(std::max<int64_t>(1, host_.chunk_scratch * states.value_heads()))) {
    step_.pieces = static_cast<int32_t>(host_.pieces.size());
    step_.rows = static_cast<int32_t>(host_.row_piece.size());
    step_.piece = pieces_.get();
    step_.row_piece = row_piece_.get();
    step_.row_position = row_position_.get();
    step_.chunks = static_cast<int32_t>(host_.chunks.size());
    step_.chunk = chunks_.get();
    step_.piece_order = piece_order_.get();
    step_.chunk_order = chunk_order_.get();
    step_.multi_pieces = host_.order.multi_pieces;
    step_.multi_chunks = host_.order.multi_chunks;
    step_.few_pieces = host_.order.few_pieces;
    step_.fold_pieces = host_.order.fold_pieces;
    scratch_.poison();  // a kernel reading scratch nobody wrote gets NaNs
  }
  const DeviceStep& get() const { return step_; }
  float* scratch() const { return scratch_.get(); }

 private:
  HostStep host_;
  DeviceBuffer<DevicePiece> pieces_;
  DeviceBuffer<int32_t> row_piece_, row_position_;
  DeviceBuffer<DeviceChunk> chunks_;
  DeviceBuffer<int32_t> piece_order_, chunk_order_;
  DeviceBuffer<float> scratch_;
  DeviceStep step_;
};

// ---- A delta rule's inputs: qkv rows, beta in (0, 1], g < 0, as a GDN layer produces them.

struct DeltaInputs {
  std::vector<float> qkv, beta, g;
};

inline DeltaInputs random_delta_inputs(const GdnDims& d, int32_t rows, uint64_t seed) {
  DeltaInputs in;
  in.qkv = random_bf16_values(static_cast<size_t>(rows) * conv_channels(d), seed);
  in.beta = random_bf16_values(static_cast<size_t>(rows) * d.value_heads, seed + 1, 0.05f, 1.0f);
  in.g = random_bf16_values(static_cast<size_t>(rows) * d.value_heads, seed + 2, -1.0f, -0.001f);
  return in;
}

struct DeviceDeltaInputs {
  explicit DeviceDeltaInputs(const DeltaInputs& in) : qkv(to_bf16(in.qkv)), beta(in.beta), g(in.g) {}
  DeviceBuffer<bf16> qkv;
  DeviceBuffer<float> beta, g;
};

constexpr float kNormEps = 1e-6f;

// The two head shapes the delta-rule kernels are compiled for (gdn_delta_rule_supports).
struct Shape {
  const char* name;
  GdnDims dims;
};
// Tiny test models: 2 key heads, 4 value heads (two per key head), key_dim 16, value_dim 32: 192 conv channels; one
// column group of 32, the whole head in one block.
constexpr Shape kTiny{"tiny", {2, 4, 16, 32}};
// Qwen3.5-9B: 16 key heads, 32 value heads, 128/128: 8192 conv channels; 4 column groups a head, a cluster of 4.
constexpr Shape kQwen9B{"qwen35_9b", {16, 32, 128, 128}};

inline void sync_ok() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError()); }

// Unwritten outputs keep the NaN poison, which compares equal bit for bit between two runs: check this first.
inline bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// Rows [first, first + count) of a row-major [rows, width] array.
inline std::vector<float> rows_of(const std::vector<float>& v, int64_t width, int64_t first, int64_t count) {
  return std::vector<float>(v.begin() + first * width, v.begin() + (first + count) * width);
}

// A layer's chunked state at `position` with what it does not hold zeroed: rows of the chunk store at and past
// position % 64 are left over from earlier chunks and never read (one-row steps write each row's keys, d and G as
// they go, a piece that completes its chunk writes none of them).
inline std::vector<float> live_state(const GdnDims& d, std::vector<float> layer_state, int32_t position) {
  const DeltaHeadState layout = delta_head(d);
  const int32_t rows = position % kDeltaChunk;
  for (int32_t h = 0; h < d.value_heads; ++h) {
    float* head = layer_state.data() + h * layout.elems();
    std::fill(head + layout.keys() + rows * d.key_dim, head + layout.d(), 0.0f);
    std::fill(head + layout.d() + rows * d.value_dim, head + layout.G(), 0.0f);
    std::fill(head + layout.G() + rows, head + layout.elems(), 0.0f);
  }
  return layer_state;
}

}  // namespace duet::backend::cuda::gdn_testing
