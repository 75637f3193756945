// The attention kernels (attention_prep.cu, attention.cu) against host references that follow the CPU backend's
// math (attention_mixer.cc), on the tiny test shape and the Qwen3.5-9B shape, with steps of several pieces at
// non-zero start positions over page tables that are not in order. Also the row-invariance contract, bit for bit:
// a piece alone or beside others, and a prompt cut at different places, give the same bytes; decode rows (which take
// their own kernel, keys split over a cluster) against the reference up to 16K positions, and unchanged by the
// other rows of their step and by those rows' roles.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/device_step.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "model/mrope.h"

namespace duet::backend::cuda {
namespace {

using duet::testing::bf16_to_float;
using duet::testing::DeviceBuffer;
using duet::testing::random_bf16_values;
using duet::testing::round_bf16;
using duet::testing::to_bf16;
using duet::testing::to_float;

constexpr int kLayers = 2;
constexpr int kLayer = 1;   // the second attention layer, so the layer offset into the pages is exercised
constexpr int kPages = 64;  // pages per layer of the storage most tests use

struct AttentionCase {
  const char* name;
  AttentionDims dims;
};
const AttentionCase kTinyAttention{"Tiny", {4, 2, 32, 8, 1e4f, 1e-6f}};
const AttentionCase k9BAttention{"Qwen35_9B", {16, 4, 256, 64, 1e7f, 1e-6f}};
// Eight query heads per KV head of 256 dims: too many for the lanes decode kernel (attention_decode_lanes.cu), so its
// decode rows take the cluster kernel (attention.cu), which the other two shapes reach only under
// DUET_ATTN_DECODE=cluster.
const AttentionCase kWideGroupAttention{"WideGroup", {32, 4, 256, 64, 1e7f, 1e-6f}};

// One sequence's pre-norm inputs at every position, as floats exactly representable in BF16, and its pages.
struct Sequence {
  int length = 0;
  std::vector<float> q_gate;   // [length, q_heads, 2, head_dim]: per head the query then the gate
  std::vector<float> k, v;     // [length, kv_heads, head_dim]
  std::vector<int32_t> pages;  // page ids in position order
  int storage_pages = kPages;  // pages per layer of the storage they are in (the same for every piece of a step)
};

Sequence make_sequence(const AttentionDims& d, int length, std::vector<int32_t> pages, uint64_t seed,
                       int storage_pages = kPages) {
  Sequence s;
  s.length = length;
  s.storage_pages = storage_pages;
  s.q_gate = random_bf16_values(static_cast<size_t>(length) * d.q_heads * 2 * d.head_dim, seed);
  s.k = random_bf16_values(static_cast<size_t>(length) * d.kv_heads * d.head_dim, seed + 1);
  s.v = random_bf16_values(static_cast<size_t>(length) * d.kv_heads * d.head_dim, seed + 2);
  s.pages = std::move(pages);
  return s;
}

// Hands out pages from a shuffled pool, so page tables are out of order (e.g. 5, 2, 9).
class PagePool {
 public:
  explicit PagePool(uint64_t seed, int pages = kPages) : ids_(pages) {
    std::iota(ids_.begin(), ids_.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(ids_.begin(), ids_.end(), rng);
  }
  std::vector<int32_t> take(int positions) {
    std::vector<int32_t> out;
    for (int i = 0; i < (positions + kPagePositions - 1) / kPagePositions; ++i) out.push_back(ids_.at(next_++));
    return out;
  }

 private:
  std::vector<int32_t> ids_;
  size_t next_ = 0;
};

// q_norm and k_norm weights, random (never the zeros of a fresh init), on the device as BF16 or as F32.
struct Norms {
  std::vector<float> q, k;
  bool f32 = false;
  std::unique_ptr<DeviceBuffer<bf16>> q_bf16, k_bf16;
  std::unique_ptr<DeviceBuffer<float>> q_f32, k_f32;

  Norms(const AttentionDims& d, bool use_f32, uint64_t seed)
      : q(random_bf16_values(d.head_dim, seed, -0.5f, 0.5f)),
        k(random_bf16_values(d.head_dim, seed + 1, -0.5f, 0.5f)),
        f32(use_f32) {
    if (f32) {
      // F32 weights that are not BF16 values, so a kernel reading them as BF16 would be caught.
      for (auto* w : {&q, &k})
        for (float& x : *w) x += 1.0f / 4096.0f;
      q_f32 = std::make_unique<DeviceBuffer<float>>(q);
      k_f32 = std::make_unique<DeviceBuffer<float>>(k);
    } else {
      q_bf16 = std::make_unique<DeviceBuffer<bf16>>(to_bf16(q));
      k_bf16 = std::make_unique<DeviceBuffer<bf16>>(to_bf16(k));
    }
  }
  DeviceWeight weight(bool query) const {
    DeviceWeight w;
    w.f32 = f32;
    w.data = f32 ? static_cast<const void*>((query ? q_f32 : k_f32)->get())
                 : static_cast<const void*>((query ? q_bf16 : k_bf16)->get());
    w.rows = 1;
    w.cols = static_cast<int64_t>(q.size());
    return w;
  }
};

// ---- Host references, following attention_mixer.cc with the BF16 roundings the CUDA contract adds.

// (1+w) RMSNorm in fp32 (statistics summed in double), rounded to BF16, then RoPE: cos/sin rounded to BF16, each
// rotated value computed in fp32 and rounded to BF16 once. Rotary pair i turns at pair_positions[i] (M-RoPE: the
// position of its stream; 1-D RoPE: the same position for every pair).
std::vector<float> ref_norm_rope_pairs(const float* x, const std::vector<float>& w, const AttentionDims& d,
                                       const std::vector<int>& pair_positions) {
  const int n = d.head_dim;
  double sum_sq = 0;
  for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_sq / n) + d.norm_eps);
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) y[i] = round_bf16((x[i] * inv_rms) * (1.0f + w[i]));
  std::vector<float> out = y;
  const int half = d.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d.rotary_dim);
    const float base_power = static_cast<float>(std::pow(static_cast<double>(d.rope_theta), exponent));
    const float angle = (1.0f / base_power) * static_cast<float>(pair_positions.at(i));
    const float c = round_bf16(static_cast<float>(std::cos(static_cast<double>(angle))));
    const float s = round_bf16(static_cast<float>(std::sin(static_cast<double>(angle))));
    out[i] = round_bf16(y[i] * c - y[i + half] * s);
    out[i + half] = round_bf16(y[i + half] * c + y[i] * s);
  }
  return out;
}
std::vector<float> ref_norm_rope(const float* x, const std::vector<float>& w, const AttentionDims& d, int position) {
  return ref_norm_rope_pairs(x, w, d, std::vector<int>(static_cast<size_t>(d.rotary_dim / 2), position));
}

// Where position `pos` of KV head `h` lives in the storage, from the layout documented in device_step.h.
int64_t slot_offset(const AttentionDims& d, const Sequence& s, int pos, int h, bool value) {
  const int64_t page_elems = static_cast<int64_t>(kPagePositions) * d.kv_heads * d.head_dim;
  const int64_t page = s.pages.at(pos / kPagePositions);
  return ((static_cast<int64_t>(kLayer) * s.storage_pages + page) * 2 + (value ? 1 : 0)) * page_elems +
         (static_cast<int64_t>(pos % kPagePositions) * d.kv_heads + h) * d.head_dim;
}

// ---- Steps.

struct StepPiece {
  const Sequence* seq;
  int start;  // position of the piece's first row
  int rows;
  DeviceRole role = DeviceRole::prefill;
};

// The step as DeviceStep describes it, built on the host and copied to the device; with `row_rope` ([rows][3]), the
// rows' rotary positions (M-RoPE).
class StepOnDevice {
 public:
  StepOnDevice(const std::vector<StepPiece>& parts, bf16* kv, const std::vector<int32_t>& row_rope = {}) {
    std::vector<DevicePiece> pieces;
    std::vector<int32_t> row_piece, row_position, page_table;
    for (size_t p = 0; p < parts.size(); ++p) {
      DevicePiece piece;
      piece.first_row = static_cast<int32_t>(row_piece.size());
      piece.rows = parts[p].rows;
      piece.start_position = parts[p].start;
      piece.page_offset = static_cast<int32_t>(page_table.size());
      const int end = parts[p].start + parts[p].rows;
      piece.page_count = (end + kPagePositions - 1) / kPagePositions;
      piece.role = parts[p].role;
      piece.kv = kv;
      piece.kv_pages = parts[p].seq->storage_pages;
      for (int i = 0; i < piece.page_count; ++i) page_table.push_back(parts[p].seq->pages.at(i));
      for (int r = 0; r < parts[p].rows; ++r) {
        row_piece.push_back(static_cast<int32_t>(p));
        row_position.push_back(parts[p].start + r);
      }
      pieces.push_back(piece);
    }
    pieces_ = std::make_unique<DeviceBuffer<DevicePiece>>(pieces);
    row_piece_ = std::make_unique<DeviceBuffer<int32_t>>(row_piece);
    row_position_ = std::make_unique<DeviceBuffer<int32_t>>(row_position);
    page_table_ = std::make_unique<DeviceBuffer<int32_t>>(page_table);
    step_.pieces = static_cast<int32_t>(pieces.size());
    step_.rows = static_cast<int32_t>(row_piece.size());
    step_.piece = pieces_->get();
    step_.row_piece = row_piece_->get();
    step_.row_position = row_position_->get();
    step_.page_table = page_table_->get();
    if (!row_rope.empty()) {
      EXPECT_EQ(row_rope.size(), 3 * row_piece.size());
      row_rope_ = std::make_unique<DeviceBuffer<int32_t>>(row_rope);
      step_.row_rope = row_rope_->get();
    }
  }
  const DeviceStep& step() const { return step_; }

 private:
  std::unique_ptr<DeviceBuffer<DevicePiece>> pieces_;
  std::unique_ptr<DeviceBuffer<int32_t>> row_piece_, row_position_, page_table_, row_rope_;
  DeviceStep step_;
};

int64_t storage_elems(const AttentionDims& d, int storage_pages) {
  return static_cast<int64_t>(kLayers) * storage_pages * 2 * kPagePositions * d.kv_heads * d.head_dim;
}

// The storage before a run: NaN everywhere (0xffff), except positions [0, start) of each piece's sequence, filled
// as earlier steps would have left them (reference K after norm and RoPE, V as is).
std::vector<bf16> initial_storage(const AttentionDims& d, const std::vector<StepPiece>& parts, const Norms& norms) {
  std::vector<bf16> kv(static_cast<size_t>(storage_elems(d, parts.at(0).seq->storage_pages)));
  std::memset(static_cast<void*>(kv.data()), 0xff, kv.size() * sizeof(bf16));  // all bits set: NaN
  for (const StepPiece& part : parts) {
    const Sequence& s = *part.seq;
    for (int pos = 0; pos < part.start; ++pos) {
      for (int h = 0; h < d.kv_heads; ++h) {
        const int64_t in = (static_cast<int64_t>(pos) * d.kv_heads + h) * d.head_dim;
        const std::vector<float> key = ref_norm_rope(&s.k[in], norms.k, d, pos);
        for (int i = 0; i < d.head_dim; ++i) {
          kv[slot_offset(d, s, pos, h, false) + i] = duet::testing::float_to_bf16(key[i]);
          kv[slot_offset(d, s, pos, h, true) + i] = duet::testing::float_to_bf16(s.v[in + i]);
        }
      }
    }
  }
  return kv;
}

struct StepOutput {
  std::vector<bf16> q_gate;  // after prep: queries normed and rotated, gates untouched
  std::vector<bf16> out;     // attention output [rows, q_heads * head_dim]
};

// The rows [start, start + rows) of a per-position array of `width` values per position.
void append_rows(const std::vector<float>& src, int start, int rows, size_t width, std::vector<float>* dst) {
  dst->insert(dst->end(), src.begin() + start * width, src.begin() + (start + rows) * width);
}

// A step's pre-norm inputs, rows in the order of `parts`.
struct StepInputs {
  std::vector<float> q_gate, k, v;
};
StepInputs step_inputs(const AttentionDims& d, const std::vector<StepPiece>& parts) {
  const size_t q_width = static_cast<size_t>(d.q_heads) * 2 * d.head_dim;
  const size_t kv_width = static_cast<size_t>(d.kv_heads) * d.head_dim;
  StepInputs in;
  for (const StepPiece& part : parts) {
    append_rows(part.seq->q_gate, part.start, part.rows, q_width, &in.q_gate);
    append_rows(part.seq->k, part.start, part.rows, kv_width, &in.k);
    append_rows(part.seq->v, part.start, part.rows, kv_width, &in.v);
  }
  return in;
}

// Runs prep then attention for one step over `kv` (device storage), rows in the order of `parts`.
StepOutput run_step(const AttentionDims& d, const std::vector<StepPiece>& parts, const Norms& norms,
                    DeviceBuffer<bf16>& kv) {
  const StepInputs in = step_inputs(d, parts);
  const size_t rows = in.q_gate.size() / (static_cast<size_t>(d.q_heads) * 2 * d.head_dim);
  StepOnDevice step(parts, kv.get());
  DeviceBuffer<bf16> q_dev(to_bf16(in.q_gate)), k_dev(to_bf16(in.k)), v_dev(to_bf16(in.v));
  DeviceBuffer<bf16> out_dev(rows * d.q_heads * d.head_dim);
  out_dev.poison();
  launch_attention_prep(step.step(), kLayer, q_dev.get(), k_dev.get(), v_dev.get(), norms.weight(true),
                        norms.weight(false), d, nullptr);
  launch_attention(step.step(), kLayer, q_dev.get(), d, out_dev.get(), nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  return {q_dev.download(), out_dev.download()};
}

size_t bit_differences(const std::vector<bf16>& a, size_t a_first, const std::vector<bf16>& b, size_t b_first,
                       size_t count) {
  size_t differ = 0;
  for (size_t i = 0; i < count; ++i) differ += std::memcmp(&a[a_first + i], &b[b_first + i], sizeof(bf16)) != 0;
  return differ;
}

// ---- The mixed step most tests use: five sequences, pieces of 1, 7, 64, 65 and 130 rows at non-zero starts.

struct MixedStep {
  std::vector<Sequence> seqs;
  std::vector<StepPiece> parts;  // in step order, which is not the order of the sequences
};

MixedStep mixed_step(const AttentionDims& d, uint64_t seed) {
  struct Plan {
    int start, rows;
    DeviceRole role;
  };
  // 1 row deep into its sequence (a decode row); 7 rows crossing no page; 64 rows on a page boundary; 65 rows
  // crossing one; 130 rows crossing two.
  const Plan plans[] = {{200, 1, DeviceRole::decode},
                        {70, 7, DeviceRole::prefill},
                        {64, 64, DeviceRole::prefill},
                        {10, 65, DeviceRole::prefill},
                        {3, 130, DeviceRole::prefill}};
  PagePool pool(seed);
  MixedStep m;
  m.seqs.reserve(5);
  for (size_t i = 0; i < 5; ++i) {
    const int length = plans[i].start + plans[i].rows;
    m.seqs.push_back(make_sequence(d, length, pool.take(length), seed + 10 * (i + 1)));
  }
  for (int i : {2, 0, 4, 1, 3}) m.parts.push_back({&m.seqs[i], plans[i].start, plans[i].rows, plans[i].role});
  return m;
}

class AttentionKernels : public ::testing::TestWithParam<AttentionCase> {
 protected:
  const AttentionDims& dims() const { return GetParam().dims; }
};

// Checks the prep of a mixed step: queries in q_gate, gates untouched, K and V in exactly their page slots.
void check_prep(const AttentionDims& d, bool f32_norms) {
  MixedStep m = mixed_step(d, 100);
  Norms norms(d, f32_norms, 7);
  const std::vector<bf16> before = initial_storage(d, m.parts, norms);
  DeviceBuffer<bf16> kv(before);
  StepOutput result = run_step(d, m.parts, norms, kv);
  const std::vector<bf16> after = kv.download();
  const std::vector<float> q_gate = to_float(result.q_gate);

  // Tolerance: the GPU sums the norm statistics in another order than the reference, so a normed value can round
  // to the neighbouring BF16 value (rarely: about 1e-7 relative against a 2^-8 spacing); RoPE then mixes two such
  // values. One BF16 ulp of the head's largest value, doubled for the two rotated inputs, bounds any element;
  // and at most 1% of the elements may differ at all.
  size_t compared = 0, differing = 0;
  auto compare_head = [&](const float* got, const std::vector<float>& want, const std::string& what) {
    float scale = 0;
    for (float x : want) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < want.size(); ++i) {
      ++compared;
      if (got[i] == want[i]) continue;
      ++differing;
      ASSERT_LE(std::fabs(got[i] - want[i]), std::ldexp(scale, -6)) << what << " dim " << i;
    }
  };
  const size_t q_width = static_cast<size_t>(d.q_heads) * 2 * d.head_dim;
  std::vector<char> written(after.size(), 0);
  int row = 0;
  for (const StepPiece& part : m.parts) {
    const Sequence& s = *part.seq;
    for (int r = 0; r < part.rows; ++r, ++row) {
      const int pos = part.start + r;
      for (int h = 0; h < d.q_heads; ++h) {
        const size_t in = pos * q_width + static_cast<size_t>(h) * 2 * d.head_dim;
        const size_t at = row * q_width + static_cast<size_t>(h) * 2 * d.head_dim;
        compare_head(&q_gate[at], ref_norm_rope(&s.q_gate[in], norms.q, d, pos),
                     "query row " + std::to_string(row) + " head " + std::to_string(h));
        for (int i = 0; i < d.head_dim; ++i)
          ASSERT_EQ(q_gate[at + d.head_dim + i], s.q_gate[in + d.head_dim + i]) << "gate changed, row " << row;
      }
      for (int h = 0; h < d.kv_heads; ++h) {
        const size_t in = (static_cast<size_t>(pos) * d.kv_heads + h) * d.head_dim;
        const int64_t key = slot_offset(d, s, pos, h, false), value = slot_offset(d, s, pos, h, true);
        const std::vector<float> got_key =
            to_float(std::vector<bf16>(after.begin() + key, after.begin() + key + d.head_dim));
        compare_head(got_key.data(), ref_norm_rope(&s.k[in], norms.k, d, pos),
                     "key pos " + std::to_string(pos) + " head " + std::to_string(h));
        for (int i = 0; i < d.head_dim; ++i) {
          ASSERT_EQ(bf16_to_float(after[value + i]), s.v[in + i]) << "value pos " << pos << " head " << h;
          written[key + i] = written[value + i] = 1;
        }
      }
    }
  }
  EXPECT_LE(differing, compared / 100) << differing << " of " << compared << " normed values differ";
  // Nothing else in the storage moved: pre-filled positions, other pages, other layer, the rest of each page.
  size_t stray = 0;
  for (size_t i = 0; i < after.size(); ++i)
    if (!written[i]) stray += std::memcmp(&after[i], &before[i], sizeof(bf16)) != 0;
  EXPECT_EQ(stray, 0u) << "prep wrote outside its rows' slots";
}

TEST_P(AttentionKernels, PrepNormsRotatesAndFillsPageSlots) {
  DUET_REQUIRE_GPU();
  check_prep(dims(), /*f32_norms=*/false);
}

TEST_P(AttentionKernels, PrepReadsF32NormWeights) {
  DUET_REQUIRE_GPU();
  check_prep(dims(), /*f32_norms=*/true);
}

// A step's attention output against a double-precision reference over the same inputs the kernel read: the prepped
// queries from q_gate and K/V from the pages (prep has its own test).
struct ReferenceCheck {
  double worst = 0;       // the largest absolute error
  size_t violations = 0;  // outputs outside the tolerance
  std::string first;      // the first of them
};
ReferenceCheck check_against_reference(const AttentionDims& d, const std::vector<StepPiece>& parts,
                                       const StepOutput& result, const std::vector<bf16>& pages_bf16) {
  const std::vector<float> pages = to_float(pages_bf16);
  const std::vector<float> q_gate = to_float(result.q_gate);
  const std::vector<float> out = to_float(result.out);
  const int hd = d.head_dim, group = d.q_heads / d.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  ReferenceCheck check;
  int row = 0;
  for (const StepPiece& part : parts) {
    for (int r = 0; r < part.rows; ++r, ++row) {
      const int pos = part.start + r;
      for (int h = 0; h < d.q_heads; ++h) {
        const float* q = &q_gate[(static_cast<size_t>(row) * d.q_heads + h) * 2 * hd];
        const int kvh = h / group;
        std::vector<double> w(pos + 1);
        std::vector<const float*> values(pos + 1);
        double max_score = -INFINITY;
        for (int j = 0; j <= pos; ++j) {
          const float* key = &pages[slot_offset(d, *part.seq, j, kvh, false)];
          values[j] = &pages[slot_offset(d, *part.seq, j, kvh, true)];
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += static_cast<double>(q[i]) * key[i];
          w[j] = dot * scale;
          max_score = std::max(max_score, w[j]);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - max_score));
        for (int i = 0; i < hd; ++i) {
          double o = 0;
          for (int j = 0; j <= pos; ++j) o += w[j] * values[j][i];
          const double want = o / sum / (1.0 + std::exp(-static_cast<double>(q[hd + i])));
          const float got = out[(static_cast<size_t>(row) * d.q_heads + h) * hd + i];
          // Tolerance: the BF16 rounding of the output (2^-8 relative) plus the fp32 error of scores, exp and the
          // weighted sum before it, well under 2^-12 absolute for |v| < 1 (even over 16K keys: the sums' rounding
          // errors grow like sqrt(keys) * 2^-24 relative; prefill rows' p enter P.V to about 2^-17).
          const double err = std::fabs(got - want);
          check.worst = std::max(check.worst, err);
          if (err > std::ldexp(std::fabs(want), -8) + std::ldexp(1.0, -12) && check.violations++ == 0) {
            check.first = "row " + std::to_string(row) + " (pos " + std::to_string(pos) + ") head " +
                          std::to_string(h) + " dim " + std::to_string(i) + ": got " + std::to_string(got) + " want " +
                          std::to_string(want);
          }
        }
      }
    }
  }
  return check;
}

// The same as a test expectation; returns the largest absolute error.
double expect_matches_reference(const AttentionDims& d, const std::vector<StepPiece>& parts, const StepOutput& result,
                                const std::vector<bf16>& pages_bf16) {
  const ReferenceCheck check = check_against_reference(d, parts, result, pages_bf16);
  EXPECT_EQ(check.violations, 0u) << "first: " << check.first;
  return check.worst;
}

// Attention of a mixed step (prefill pieces of several sizes and a decode row) against the reference.
TEST_P(AttentionKernels, AttentionMatchesReference) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  MixedStep m = mixed_step(d, 200);
  Norms norms(d, false, 9);
  DeviceBuffer<bf16> kv(initial_storage(d, m.parts, norms));
  const StepOutput result = run_step(d, m.parts, norms, kv);
  const double worst = expect_matches_reference(d, m.parts, result, kv.download());
  RecordProperty("max_abs_error", std::to_string(worst));
}

// Decode rows at the edges of pages, of the split over a cluster's blocks (one key block per block up to 512
// positions, then several) and deep into a long sequence, each in a step of its own, against the reference.
TEST_P(AttentionKernels, DecodeRowsMatchReference) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  constexpr int kLength = 16384;
  constexpr int kStoragePages = kLength / kPagePositions;
  PagePool pool(700, kStoragePages);
  const Sequence seq = make_sequence(d, kLength, pool.take(kLength), 701, kStoragePages);
  Norms norms(d, false, 23);
  // Positions [0, kLength - 1) are in the pages; each step's prep writes its own position (ascending, so a row
  // reads only slots that stay as they are after its step).
  DeviceBuffer<bf16> kv(initial_storage(d, {{&seq, kLength - 1, 1}}, norms));
  std::vector<StepPiece> parts;
  std::vector<StepOutput> results;
  for (int pos : {0, 1, 63, 64, 511, 512, 513, 1023, 1024, 4095, 16383}) {
    parts.push_back({&seq, pos, 1, DeviceRole::decode});
    results.push_back(run_step(d, {parts.back()}, norms, kv));
  }
  const std::vector<bf16> pages = kv.download();
  double worst = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    SCOPED_TRACE("decode row at position " + std::to_string(parts[i].start));
    worst = std::max(worst, expect_matches_reference(d, {parts[i]}, results[i], pages));
  }
  RecordProperty("max_abs_error", std::to_string(worst));
}

// Prefill rows deep into a sequence (positions 2030-2099, keys over 33 pages, the piece crossing a page boundary) and a
// short piece beside them. Holds the sequences its pieces point to, so it stays where it was made.
struct LongRowsStep {
  static constexpr int kStoragePages = 40;
  PagePool pool{1400, kStoragePages};
  Sequence seq, other;
  std::vector<StepPiece> parts;
  explicit LongRowsStep(const AttentionDims& d)
      : seq(make_sequence(d, 2100, pool.take(2100), 1401, kStoragePages)),
        other(make_sequence(d, 70, pool.take(70), 1402, kStoragePages)),
        parts{{&seq, 2030, 70}, {&other, 67, 3}} {}
  LongRowsStep(const LongRowsStep&) = delete;
  LongRowsStep& operator=(const LongRowsStep&) = delete;
};

// LongRowsStep against the reference.
TEST_P(AttentionKernels, LongPrefillRowsMatchReference) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  const LongRowsStep step(d);
  const std::vector<StepPiece>& parts = step.parts;
  Norms norms(d, false, 37);
  DeviceBuffer<bf16> kv(initial_storage(d, parts, norms));
  const StepOutput result = run_step(d, parts, norms, kv);
  RecordProperty("max_abs_error", std::to_string(expect_matches_reference(d, parts, result, kv.download())));
}

// Value slices (attention_prefill.cu): a tile's output dims computed by 1, 2 or 4 blocks give the same bits, on rows
// deep into a sequence (positions 2030-2099 over 33 pages) beside a short piece. Head dims under 128 take one slice
// whatever is asked, so the tiny shape compares a launch with itself. Control: the same launch over pages with one
// value changed differs, so the comparison sees the values.
TEST_P(AttentionKernels, ValueSlicesGiveIdenticalRows) {
  DUET_REQUIRE_GPU();
  struct Slices {
    explicit Slices(int n) { set_prefill_value_slices_for_tests(n); }
    ~Slices() { set_prefill_value_slices_for_tests(0); }
  };
  const AttentionDims& d = dims();
  const LongRowsStep step(d);
  const std::vector<StepPiece>& parts = step.parts;
  Norms norms(d, false, 37);
  const std::vector<bf16> storage = initial_storage(d, parts, norms);
  std::vector<std::vector<bf16>> outs;
  for (int slices : {1, 2, 4}) {
    const Slices use(slices);
    DeviceBuffer<bf16> kv(storage);
    outs.push_back(run_step(d, parts, norms, kv).out);
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    ASSERT_EQ(outs[i].size(), outs[0].size());
    EXPECT_EQ(bit_differences(outs[i], 0, outs[0], 0, outs[0].size()), 0u) << (i == 1 ? "2 slices" : "4 slices");
  }
  std::vector<bf16> changed = storage;
  const int64_t at = slot_offset(d, step.seq, 5, 0, true);
  for (int i = 0; i < d.head_dim; ++i) changed[at + i] = changed[at + (i + 1) % d.head_dim];
  const Slices use(4);
  DeviceBuffer<bf16> kv(changed);
  EXPECT_GT(bit_differences(run_step(d, parts, norms, kv).out, 0, outs[0], 0, outs[0].size()), 0u);
}

// The lanes decode form with each KV head's queries split over blocks of one (set_attention_query_split_rows_for_tests,
// DUET_ATTN_QUERY_SPLIT_ROWS) gives the same bytes as with a block for the whole group: decode rows at the edges of
// pages and of the cluster's split, deep into a 16K sequence, each in a step of its own, and four of them in one step
// (split up to 4 rows), against the same rows unsplit. The shapes whose decode rows take the cluster form (WideGroup)
// compare that form with itself. Control: one query head's first input negated changes that head's output bits and
// leaves the other heads' (so the comparison sees one input of one head, and each block writes its own heads). A
// BF16 ulp was the control at first: on the 9B shape the query's RMSNorm and the output's rounding absorbed it (H100,
// session 59), so it showed nothing about the kernel.
TEST_P(AttentionKernels, QueriesSplitOverBlocksGiveTheSameRows) {
  DUET_REQUIRE_GPU();
  struct Split {
    explicit Split(int rows) { set_attention_query_split_rows_for_tests(rows); }
    ~Split() { set_attention_query_split_rows_for_tests(-1); }
  };
  const AttentionDims& d = dims();
  constexpr int kLength = 16384;
  constexpr int kStoragePages = kLength / kPagePositions;
  PagePool pool(710, kStoragePages);
  Sequence seq = make_sequence(d, kLength, pool.take(kLength), 711, kStoragePages);
  Norms norms(d, false, 41);
  const std::vector<bf16> storage = initial_storage(d, {{&seq, kLength - 1, 1}}, norms);
  std::vector<std::vector<StepPiece>> steps;
  for (int pos : {0, 63, 64, 511, 513, 1100, 4095, 16383}) steps.push_back({{&seq, pos, 1, DeviceRole::decode}});
  steps.push_back({{&seq, 900, 1, DeviceRole::decode},
                   {&seq, 3000, 1, DeviceRole::decode},
                   {&seq, 40, 1, DeviceRole::decode},
                   {&seq, 12000, 1, DeviceRole::decode}});
  // Each step on the same storage: prep writes only its rows' own positions, which no other step's row reads (every
  // row reads positions up to its own, and the storage holds every earlier position already).
  auto run_all = [&](int split_rows) {
    const Split use(split_rows);
    DeviceBuffer<bf16> kv(storage);
    std::vector<std::vector<bf16>> outs;
    for (const std::vector<StepPiece>& parts : steps) outs.push_back(run_step(d, parts, norms, kv).out);
    return outs;
  };
  const std::vector<std::vector<bf16>> whole = run_all(0), split = run_all(4);
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i) + ", first row at " + std::to_string(steps[i][0].start));
    ASSERT_EQ(split[i].size(), whole[i].size());
    EXPECT_EQ(bit_differences(split[i], 0, whole[i], 0, whole[i].size()), 0u);
  }

  // The control, on the 1,100-position row alone on a fresh storage, split: query head 1's first input negated.
  const Split use(4);
  auto run_alone = [&] {
    DeviceBuffer<bf16> kv(storage);
    return run_step(d, steps[5], norms, kv).out;
  };
  const std::vector<bf16> before = run_alone();
  const size_t head = 1, width = static_cast<size_t>(d.head_dim);
  float& x = seq.q_gate[(static_cast<size_t>(1100) * d.q_heads + head) * 2 * width];
  ASSERT_NE(x, 0.0f);
  x = -x;
  const std::vector<bf16> nudged = run_alone();
  EXPECT_GT(bit_differences(nudged, head * width, before, head * width, width), 0u) << "head 1";
  EXPECT_EQ(bit_differences(nudged, 0, before, 0, width), 0u) << "head 0";
}

// The planted control of the reference check: the same step's output against pages with two keys swapped must fail
// it (a kernel that read the wrong key would be caught).
TEST_P(AttentionKernels, ReferenceCheckCatchesASwappedKey) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  MixedStep m = mixed_step(d, 200);
  Norms norms(d, false, 9);
  DeviceBuffer<bf16> kv(initial_storage(d, m.parts, norms));
  const StepOutput result = run_step(d, m.parts, norms, kv);
  std::vector<bf16> pages = kv.download();
  ASSERT_EQ(check_against_reference(d, m.parts, result, pages).violations, 0u);
  // Keys 20 and 21 of KV head 0 of the 130-row piece's sequence (rows at positions 3 .. 132 read both).
  const Sequence& seq = *m.parts[2].seq;
  ASSERT_EQ(m.parts[2].rows, 130);
  const int64_t a = slot_offset(d, seq, 20, 0, false), b = slot_offset(d, seq, 21, 0, false);
  std::swap_ranges(pages.begin() + a, pages.begin() + a + d.head_dim, pages.begin() + b);
  EXPECT_GT(check_against_reference(d, m.parts, result, pages).violations, 0u);
}

// Each piece run alone gives the same bytes as beside the others in `parts`: queries, outputs and K/V slots.
void expect_alone_equals_together(const AttentionDims& d, const std::vector<StepPiece>& parts, const Norms& norms) {
  DeviceBuffer<bf16> kv_all(initial_storage(d, parts, norms));
  const StepOutput all = run_step(d, parts, norms, kv_all);
  const std::vector<bf16> pages_all = kv_all.download();

  const size_t q_width = static_cast<size_t>(d.q_heads) * 2 * d.head_dim;
  const size_t out_width = static_cast<size_t>(d.q_heads) * d.head_dim;
  size_t first_row = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const StepPiece& part = parts[p];
    DeviceBuffer<bf16> kv_one(initial_storage(d, {part}, norms));
    const StepOutput one = run_step(d, {part}, norms, kv_one);
    const std::vector<bf16> pages_one = kv_one.download();
    EXPECT_EQ(bit_differences(one.q_gate, 0, all.q_gate, first_row * q_width, part.rows * q_width), 0u)
        << "q_gate, piece " << p << " of " << part.rows << " rows";
    EXPECT_EQ(bit_differences(one.out, 0, all.out, first_row * out_width, part.rows * out_width), 0u)
        << "output, piece " << p << " of " << part.rows << " rows";
    for (int pos = part.start; pos < part.start + part.rows; ++pos) {
      for (int h = 0; h < d.kv_heads; ++h) {
        for (bool value : {false, true}) {
          const int64_t at = slot_offset(d, *part.seq, pos, h, value);
          EXPECT_EQ(bit_differences(pages_one, at, pages_all, at, d.head_dim), 0u) << "slot pos " << pos;
        }
      }
    }
    first_row += part.rows;
  }
}

// (a) Row invariance over the mixed step.
TEST_P(AttentionKernels, PieceAloneEqualsPieceBesideOthers) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  MixedStep m = mixed_step(d, 300);
  Norms norms(d, false, 11);
  expect_alone_equals_together(d, m.parts, norms);
}

// (a) again over a decode-heavy step: 40 decode rows, then a 20-row and a 65-row prefill piece, so the long pieces
// are found past the first 32 pieces.
TEST_P(AttentionKernels, LongPiecesAfterManyDecodeRows) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  PagePool pool(500);
  std::vector<Sequence> seqs;
  seqs.reserve(42);
  std::vector<StepPiece> parts;
  for (int i = 0; i < 40; ++i) {
    seqs.push_back(make_sequence(d, 5 + i + 1, pool.take(5 + i + 1), 600 + 3 * i));
    parts.push_back({&seqs.back(), 5 + i, 1, DeviceRole::decode});
  }
  seqs.push_back(make_sequence(d, 120, pool.take(120), 800));
  parts.push_back({&seqs.back(), 100, 20});
  seqs.push_back(make_sequence(d, 95, pool.take(95), 900));
  parts.push_back({&seqs.back(), 30, 65});
  Norms norms(d, false, 19);
  expect_alone_equals_together(d, parts, norms);
}

// (a) for decode rows deep enough to be split over a cluster's blocks: 40 decode rows, every fourth at 40 to 1732
// positions (1 to 28 key blocks, so 1 to 7 blocks of the cluster at work), beside prefill pieces of 1, 20 and 65 rows;
// each piece alone gives the same bytes.
TEST_P(AttentionKernels, LongDecodeRowsAloneEqualThemInAMixedStep) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  constexpr int kStoragePages = 256;
  PagePool pool(1000, kStoragePages);
  std::vector<Sequence> seqs;
  seqs.reserve(43);
  std::vector<StepPiece> parts;
  for (int i = 0; i < 40; ++i) {
    const int pos = i % 4 == 0 ? 40 + 47 * i : 3 + 5 * i;
    seqs.push_back(make_sequence(d, pos + 1, pool.take(pos + 1), 1100 + 3 * i, kStoragePages));
    parts.push_back({&seqs.back(), pos, 1, DeviceRole::decode});
  }
  seqs.push_back(make_sequence(d, 120, pool.take(120), 1300, kStoragePages));
  parts.push_back({&seqs.back(), 100, 20});
  seqs.push_back(make_sequence(d, 300, pool.take(300), 1310, kStoragePages));
  parts.push_back({&seqs.back(), 299, 1});
  seqs.push_back(make_sequence(d, 95, pool.take(95), 1320, kStoragePages));
  parts.push_back({&seqs.back(), 30, 65});
  // Prefill pieces first, as well as after the decode rows.
  std::rotate(parts.begin(), parts.begin() + 40, parts.begin() + 41);
  Norms norms(d, false, 29);
  expect_alone_equals_together(d, parts, norms);
}

// A row's bytes do not depend on the roles of the other rows of its step: the same step with the other pieces'
// roles flipped (one-row pieces, a 7-row and a 65-row piece, each as prefill and as decode) leaves every row whose
// own role stayed the same unchanged, and each run matches the reference.
TEST_P(AttentionKernels, RowsUnchangedWhenOtherRolesChange) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  PagePool pool(1200);
  std::vector<Sequence> seqs;
  struct Plan {
    int start, rows;
  };
  const Plan plans[] = {{1500, 1}, {700, 1}, {300, 1}, {70, 7}, {10, 65}, {900, 1}};
  seqs.reserve(std::size(plans));
  for (size_t i = 0; i < std::size(plans); ++i) {
    const int length = plans[i].start + plans[i].rows;
    seqs.push_back(make_sequence(d, length, pool.take(length), 1210 + 10 * i));
  }
  // Piece 0 is decode and piece 5 prefill in both runs; pieces 1-4 change roles.
  using R = DeviceRole;
  const std::vector<R> roles_a = {R::decode, R::decode, R::prefill, R::prefill, R::prefill, R::prefill};
  const std::vector<R> roles_b = {R::decode, R::prefill, R::decode, R::decode, R::decode, R::prefill};
  auto parts_for = [&](const std::vector<R>& roles) {
    std::vector<StepPiece> parts;
    for (size_t i = 0; i < std::size(plans); ++i) parts.push_back({&seqs[i], plans[i].start, plans[i].rows, roles[i]});
    return parts;
  };
  const std::vector<StepPiece> parts_a = parts_for(roles_a), parts_b = parts_for(roles_b);
  Norms norms(d, false, 31);
  const std::vector<bf16> initial = initial_storage(d, parts_a, norms);
  DeviceBuffer<bf16> kv_a(initial), kv_b(initial);
  const StepOutput a = run_step(d, parts_a, norms, kv_a);
  const StepOutput b = run_step(d, parts_b, norms, kv_b);
  {
    SCOPED_TRACE("roles a");
    expect_matches_reference(d, parts_a, a, kv_a.download());
  }
  {
    SCOPED_TRACE("roles b");
    expect_matches_reference(d, parts_b, b, kv_b.download());
  }
  const size_t out_width = static_cast<size_t>(d.q_heads) * d.head_dim;
  size_t first_row = 0;
  for (size_t i = 0; i < std::size(plans); ++i) {
    if (roles_a[i] == roles_b[i]) {
      EXPECT_EQ(bit_differences(a.out, first_row * out_width, b.out, first_row * out_width, plans[i].rows * out_width),
                0u)
          << "piece " << i << " (" << (roles_a[i] == R::decode ? "decode" : "prefill") << ")";
    }
    first_row += plans[i].rows;
  }
}

// Runs one 194-position sequence whose positions [0, 64) are already in the pages, its remaining 130 rows cut into
// consecutive prefill pieces of the given sizes, one step per piece (pages filled progressively), beside an unrelated
// 5-row prefill piece in every step. Returns the outputs of the 130 rows and the final pages.
struct CutRun {
  std::vector<bf16> out;
  std::vector<bf16> pages;
};
CutRun run_cut(const AttentionDims& d, const std::vector<int>& cut, const Norms& norms) {
  PagePool pool(400);
  const Sequence seq = make_sequence(d, 194, pool.take(194), 401);
  const Sequence other = make_sequence(d, 300, pool.take(300), 402);
  DeviceBuffer<bf16> kv(initial_storage(d, {{&seq, 64, 130}, {&other, 295, 5}}, norms));
  CutRun run;
  int start = 64;
  const size_t out_width = static_cast<size_t>(d.q_heads) * d.head_dim;
  for (size_t i = 0; i < cut.size(); ++i) {
    // The other piece sits before the sequence in even steps and after it in odd ones.
    std::vector<StepPiece> parts = {{&seq, start, cut[i]}};
    const StepPiece beside{&other, 295, 5};
    parts.insert(i % 2 == 0 ? parts.begin() : parts.end(), beside);
    const StepOutput step = run_step(d, parts, norms, kv);
    const size_t first = i % 2 == 0 ? 5 : 0;
    run.out.insert(run.out.end(), step.out.begin() + first * out_width,
                   step.out.begin() + (first + cut[i]) * out_width);
    start += cut[i];
  }
  run.pages = kv.download();
  return run;
}

// (b) Cuts: 130 rows as one piece, as 64 + 66 and as 1 + 63 + 66 give the same bytes (outputs and pages).
TEST_P(AttentionKernels, CutsGiveIdenticalRows) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  Norms norms(d, false, 13);
  const CutRun whole = run_cut(d, {130}, norms);
  for (const std::vector<int>& cut : {std::vector<int>{64, 66}, std::vector<int>{1, 63, 66}}) {
    const CutRun pieces = run_cut(d, cut, norms);
    ASSERT_EQ(pieces.out.size(), whole.out.size());
    EXPECT_EQ(bit_differences(pieces.out, 0, whole.out, 0, whole.out.size()), 0u) << "outputs, cut " << cut.size();
    EXPECT_EQ(bit_differences(pieces.pages, 0, whole.pages, 0, whole.pages.size()), 0u) << "pages, cut " << cut.size();
  }
}

// A property of these kernels stronger than the contract: every prefill row takes the same arithmetic in the rows
// kernel (short pieces) and the tiles kernel (long pieces), so 130 one-row prefill steps equal one 130-row piece bit
// for bit. (Decode rows take their own kernel and may differ from both in the last bits.)
TEST_P(AttentionKernels, RowByRowEqualsOnePiece) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  Norms norms(d, false, 17);
  const CutRun whole = run_cut(d, {130}, norms);
  const CutRun rows = run_cut(d, std::vector<int>(130, 1), norms);
  EXPECT_EQ(bit_differences(rows.out, 0, whole.out, 0, whole.out.size()), 0u);
  EXPECT_EQ(bit_differences(rows.pages, 0, whole.pages, 0, whole.pages.size()), 0u);
}

// ---- M-RoPE (docs/vision.md 5): rows whose rotary positions are (time, height, width), in DeviceStep::row_rope.

// The stream of each rotary pair for the shape, laid out as model/mrope.h does: tiny-vl's mrope_section [2, 1, 1]
// (rotary_dim 8), the 9B's [11, 11, 10] (rotary_dim 64).
std::vector<int32_t> streams_of(const AttentionDims& d) {
  const std::vector<int64_t> section =
      d.rotary_dim == 8 ? std::vector<int64_t>{2, 1, 1} : std::vector<int64_t>{11, 11, 10};
  return model::mrope_streams(d.rotary_dim, section);
}
RopeStreams device_streams(const std::vector<int32_t>& streams) {
  RopeStreams out;
  for (size_t i = 0; i < streams.size(); ++i) out.stream[i] = static_cast<uint8_t>(streams[i]);
  return out;
}

// Prep alone over one step, on a storage that starts all NaN: q_gate after it and the whole storage.
struct PrepResult {
  std::vector<bf16> q_gate, kv;
};
PrepResult run_prep(const AttentionDims& d, const std::vector<StepPiece>& parts, const Norms& norms,
                    const std::vector<int32_t>& row_rope, const RopeStreams& streams) {
  const StepInputs in = step_inputs(d, parts);
  std::vector<bf16> nan(static_cast<size_t>(storage_elems(d, parts.at(0).seq->storage_pages)));
  std::memset(static_cast<void*>(nan.data()), 0xff, nan.size() * sizeof(bf16));
  DeviceBuffer<bf16> kv(nan);
  StepOnDevice step(parts, kv.get(), row_rope);
  DeviceBuffer<bf16> q_dev(to_bf16(in.q_gate)), k_dev(to_bf16(in.k)), v_dev(to_bf16(in.v));
  launch_attention_prep(step.step(), kLayer, q_dev.get(), k_dev.get(), v_dev.get(), norms.weight(true),
                        norms.weight(false), d, nullptr, streams);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  return {q_dev.download(), kv.download()};
}

// Elements of a head further from the reference than one BF16 ulp of the head's largest value, doubled (check_prep's
// bound: the norm statistics summed in another order move a normed value to its neighbour at most).
size_t outside_ulp(const float* got, const std::vector<float>& want) {
  float scale = 0;
  for (float x : want) scale = std::max(scale, std::fabs(x));
  size_t outside = 0;
  for (size_t i = 0; i < want.size(); ++i) outside += std::fabs(got[i] - want[i]) > std::ldexp(scale, -6) ? 1 : 0;
  return outside;
}

// An image's rows rotate each pair at the position of its stream, text rows after images at their position plus the
// delta, against the host reference; K and V go to each row's own position, whatever its rotary positions. The
// controls the comparison must see: the image rows at 1-D positions, and every pair reading the time stream.
TEST_P(AttentionKernels, PrepRotatesEachPairAtItsStreamsPosition) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  const std::vector<int32_t> streams = streams_of(d);
  PagePool pool(900);
  // An image of 5 x 8 merged tokens whose run starts at position 7 (rows at 7..46: time 7, height 7 + row, width
  // 7 + column), and three text rows at positions 130..132 after images (delta -60).
  const Sequence image = make_sequence(d, 47, pool.take(47), 901);
  const Sequence text = make_sequence(d, 133, pool.take(133), 911);
  const std::vector<StepPiece> parts = {{&text, 130, 3}, {&image, 7, 40}};
  std::vector<int32_t> row_rope;
  for (int t = 0; t < 3; ++t) row_rope.insert(row_rope.end(), {70 + t, 70 + t, 70 + t});
  for (int r = 0; r < 40; ++r) row_rope.insert(row_rope.end(), {7, 7 + r / 8, 7 + r % 8});
  Norms norms(d, false, 903);
  const PrepResult got = run_prep(d, parts, norms, row_rope, device_streams(streams));
  const std::vector<float> q_gate = to_float(got.q_gate), kv = to_float(got.kv);

  const int hd = d.head_dim;
  const size_t q_width = static_cast<size_t>(d.q_heads) * 2 * hd, pairs = static_cast<size_t>(d.rotary_dim / 2);
  size_t compared = 0, differing = 0, outside = 0, outside_1d = 0, outside_time = 0;
  int row = 0;
  for (const StepPiece& part : parts) {
    for (int r = 0; r < part.rows; ++r, ++row) {
      const int pos = part.start + r;
      const int32_t* thw = &row_rope[3 * static_cast<size_t>(row)];
      std::vector<int> at;
      for (int32_t s : streams) at.push_back(thw[s]);
      const std::vector<int> one_d(pairs, pos), time(pairs, thw[0]);
      auto check = [&](const float* got_head, const float* x, const std::vector<float>& w) {
        const std::vector<float> want = ref_norm_rope_pairs(x, w, d, at);
        outside += outside_ulp(got_head, want);
        for (int i = 0; i < hd; ++i) differing += got_head[i] != want[i] ? 1 : 0;
        compared += static_cast<size_t>(hd);
        if (part.seq == &image) {
          outside_1d += outside_ulp(got_head, ref_norm_rope_pairs(x, w, d, one_d));
          outside_time += outside_ulp(got_head, ref_norm_rope_pairs(x, w, d, time));
        }
      };
      for (int h = 0; h < d.q_heads; ++h) {
        const size_t offset = static_cast<size_t>(h) * 2 * hd;
        check(&q_gate[row * q_width + offset], &part.seq->q_gate[pos * q_width + offset], norms.q);
      }
      for (int h = 0; h < d.kv_heads; ++h) {
        const size_t in = (static_cast<size_t>(pos) * d.kv_heads + h) * hd;
        check(&kv[slot_offset(d, *part.seq, pos, h, false)], &part.seq->k[in], norms.k);
        const int64_t value = slot_offset(d, *part.seq, pos, h, true);
        for (int i = 0; i < hd; ++i) ASSERT_EQ(kv[value + i], part.seq->v[in + i]) << "value at position " << pos;
      }
    }
  }
  EXPECT_EQ(outside, 0u) << "queries or keys rotated otherwise than at their streams' positions";
  EXPECT_LE(differing, compared / 100) << differing << " of " << compared << " values differ";
  EXPECT_GT(outside_1d, 0u) << "the control: image rows at 1-D positions must fail the comparison";
  EXPECT_GT(outside_time, 0u) << "the control: every pair at the time stream must fail the comparison";
}

// With every row's three rotary positions equal to its position, a step has the bytes of the same step without
// rotary positions (the text path); and a row at p + k in all three streams rotates as a row at position p + k does.
TEST_P(AttentionKernels, EqualStreamsHaveTheTextPathsBits) {
  DUET_REQUIRE_GPU();
  const AttentionDims& d = dims();
  const RopeStreams streams = device_streams(streams_of(d));
  MixedStep m = mixed_step(d, 300);
  Norms norms(d, false, 301);
  std::vector<int32_t> same;
  for (const StepPiece& part : m.parts)
    for (int r = 0; r < part.rows; ++r) same.insert(same.end(), {part.start + r, part.start + r, part.start + r});
  const PrepResult text = run_prep(d, m.parts, norms, {}, streams), equal = run_prep(d, m.parts, norms, same, streams);
  EXPECT_EQ(bit_differences(text.q_gate, 0, equal.q_gate, 0, text.q_gate.size()), 0u) << "queries";
  EXPECT_EQ(bit_differences(text.kv, 0, equal.kv, 0, text.kv.size()), 0u) << "K/V pages";

  // 65 rows at positions 10.. rotating at 47..; the same inputs 37 positions later in a sequence moved by 37.
  constexpr int kShift = 37;
  PagePool pool(310);
  const Sequence seq = make_sequence(d, 75, pool.take(75), 311);
  Sequence moved = seq;
  moved.length += kShift;
  moved.pages = pool.take(moved.length);
  for (std::vector<float>* v : {&moved.q_gate, &moved.k, &moved.v}) {
    const size_t width = v->size() / static_cast<size_t>(seq.length);
    const std::vector<float> front = random_bf16_values(width * kShift, 312);
    v->insert(v->begin(), front.begin(), front.end());
  }
  std::vector<int32_t> shifted;
  for (int r = 0; r < 65; ++r) shifted.insert(shifted.end(), {10 + kShift + r, 10 + kShift + r, 10 + kShift + r});
  const PrepResult rope = run_prep(d, {{&seq, 10, 65}}, norms, shifted, streams);
  const PrepResult plain = run_prep(d, {{&moved, 10 + kShift, 65}}, norms, {}, streams);
  EXPECT_EQ(bit_differences(rope.q_gate, 0, plain.q_gate, 0, rope.q_gate.size()), 0u) << "shifted queries";
  size_t keys = 0;
  for (int r = 0; r < 65; ++r)
    for (int h = 0; h < d.kv_heads; ++h)
      keys += bit_differences(rope.kv, static_cast<size_t>(slot_offset(d, seq, 10 + r, h, false)), plain.kv,
                              static_cast<size_t>(slot_offset(d, moved, 10 + kShift + r, h, false)),
                              static_cast<size_t>(d.head_dim));
  EXPECT_EQ(keys, 0u) << "shifted keys";
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels, ::testing::Values(kTinyAttention, k9BAttention, kWideGroupAttention),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(AttentionKernelsRefusal, UnsupportedHeadDimIsRefused) {
  DUET_REQUIRE_GPU();
  DeviceStep step;  // never launched: the refusal comes first
  AttentionDims d{4, 2, 48, 8, 1e4f, 1e-6f};
  EXPECT_THROW(launch_attention(step, 0, nullptr, d, nullptr, nullptr), std::runtime_error);
  d = {6, 4, 32, 8, 1e4f, 1e-6f};  // q_heads not a multiple of kv_heads
  EXPECT_THROW(launch_attention(step, 0, nullptr, d, nullptr, nullptr), std::runtime_error);
}

}  // namespace
}  // namespace duet::backend::cuda
