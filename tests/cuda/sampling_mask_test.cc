// Structured outputs on the device sampler: a row's token mask (SamplingRowParams::mask_offset, grammar/token_mask.h
// layout) is applied as the CPU sampler applies it (engine::sample_token with the same mask): same ids for greedy,
// temperature, top-k, top-p, min-p and penalties, masks from one allowed id to nearly all, and short masks (a missing
// word allows nothing). Rows are independent: a masked row alone equals the same row among unmasked ones, and the
// unmasked rows equal themselves without the masked one beside them. Planted control: the kernel run without its
// masks must draw ids the masks forbid. And the masks' own upload (mask_upload.h) as the CUDA backend uses it since the
// masks are written beside the forward (issue 19): the sampler reads what the host wrote before the copy, never less.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/cuda/mask_upload.h"
#include "backend/cuda/sampling.h"
#include "cuda_test_util.h"
#include "engine/sampler.h"

namespace duet::backend::cuda {
namespace {

using ::duet::testing::DeviceBuffer;

struct Row {
  std::vector<float> logits;
  engine::SamplingParams params;
  std::vector<int32_t> generated;
  std::vector<uint32_t> mask;  // empty: unmasked
  int64_t position = 0;
};

backend::PenaltyCounts counts_of(const Row& r) {
  backend::PenaltyCounts c;
  for (int32_t id : r.generated) c.add(CountsUpdate::Kind::generated, id);
  return c;
}

// Row k's settings, its counts in slot k (when a penalty is on, as the engine's sample_spec gives them).
SamplingRowParams row_params(const Row& r, int32_t slot) {
  SamplingRowParams p;
  static_cast<SamplingKnobs&>(p) = r.params;
  p.seed = r.params.seed;
  p.position = r.position;
  if (engine::penalized(r.params)) p.counts_slot = slot;
  return p;
}

// Every row's counts as a device storage keeps them: [rows, vocab] words.
std::vector<uint32_t> count_words(const std::vector<Row>& rows) {
  const size_t vocab = rows.front().logits.size();
  std::vector<uint32_t> words(rows.size() * vocab, 0u);
  for (size_t k = 0; k < rows.size(); ++k) {
    const backend::PenaltyCounts held = counts_of(rows[k]);
    for (const auto& [id, word] : held.words()) words[k * vocab + static_cast<size_t>(id)] = word;
  }
  return words;
}

std::vector<DeviceSample> run(const std::vector<Row>& rows, bool pass_masks, const SamplingTestHooks& hooks) {
  const auto vocab = static_cast<int32_t>(rows.front().logits.size());
  std::vector<float> logits;
  std::vector<SamplingRowParams> params;
  std::vector<uint32_t> masks;
  for (const Row& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    SamplingRowParams p = row_params(r, static_cast<int32_t>(params.size()));
    if (!r.mask.empty()) {
      p.mask_offset = static_cast<int64_t>(masks.size());
      p.mask_words = static_cast<int32_t>(r.mask.size());
      masks.insert(masks.end(), r.mask.begin(), r.mask.end());
    }
    params.push_back(p);
  }
  masks.push_back(0);
  const auto n = static_cast<int32_t>(rows.size());
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<SamplingRowParams> d_params(params);
  DeviceBuffer<uint32_t> d_counts(count_words(rows));
  DeviceBuffer<uint32_t> d_masks(masks);
  DeviceBuffer<DeviceSample> d_out(static_cast<size_t>(n));
  const size_t bytes = sampling_scratch_bytes(n, vocab);
  DeviceBuffer<unsigned char> scratch(bytes);
  launch_sample(d_logits.get(), n, vocab, d_params.get(), PenaltyTables{d_counts.get(), vocab}, d_out.get(), nullptr,
                scratch.get(), bytes, nullptr, hooks, pass_masks ? d_masks.get() : nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_out.download();
}

std::vector<Row> make_rows(int32_t vocab, uint32_t seed, int count = 48) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<Row> rows;
  const int32_t words = (vocab + 31) / 32;
  for (int k = 0; k < count; ++k) {
    Row r;
    for (int32_t i = 0; i < vocab; ++i) r.logits.push_back(normal(rng));
    switch (k % 6) {
      case 0:
        r.params.temperature = 0;
        break;
      case 1:
        r.params.temperature = 0.8f;
        break;
      case 2:
        r.params.top_k = 40;
        break;
      case 3:
        r.params.top_p = 0.9f;
        break;
      case 4:
        r.params.min_p = 0.05f, r.params.top_p = 0.95f;
        break;
      case 5:
        r.params.repetition_penalty = 1.3f, r.params.frequency_penalty = 0.5f;
        r.generated = {1, 2, 2, 5};
        break;
    }
    r.params.seed = rng();
    r.position = k;
    if (k % 4 != 3) {                   // every fourth row unmasked
      const int density = (k / 4) % 4;  // one id, ~1%, ~50%, all but a few; some masks short
      r.mask.assign(static_cast<size_t>(density == 0 && k % 8 == 0 ? words / 2 : words), 0u);
      for (int32_t i = 0; i < static_cast<int32_t>(r.mask.size()) * 32 && i < vocab; ++i) {
        const bool on = density == 0   ? i == static_cast<int32_t>(rng() % (r.mask.size() * 32)) % vocab
                        : density == 1 ? rng() % 100 == 0
                        : density == 2 ? rng() % 2 == 0
                                       : rng() % 50 != 0;
        if (on) r.mask[static_cast<size_t>(i) / 32] |= 1u << (i % 32);
      }
      if (std::all_of(r.mask.begin(), r.mask.end(), [](uint32_t w) { return w == 0; })) r.mask[0] = 1u;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

bool allowed(const Row& r, int32_t id) {
  const size_t w = static_cast<size_t>(id) / 32;
  return r.mask.empty() || (w < r.mask.size() && ((r.mask[w] >> (id % 32)) & 1u));
}

TEST(CudaSamplingMask, MatchesTheCpuSamplerRowByRow) {
  DUET_REQUIRE_GPU();
  for (int32_t vocab : {512, 4099}) {
    for (int32_t cap : {0, 64}) {
      const std::vector<Row> rows = make_rows(vocab, static_cast<uint32_t>(vocab + cap));
      const auto got = run(rows, true, {.tile_cap = cap});
      for (size_t k = 0; k < rows.size(); ++k) {
        const Row& r = rows[k];
        const auto want = engine::sample_token(r.logits, r.params, counts_of(r), r.position, r.mask);
        EXPECT_EQ(got[k].id, want.id) << "vocab " << vocab << " cap " << cap << " row " << k;
        EXPECT_TRUE(allowed(r, got[k].id)) << "row " << k;
      }
    }
  }
}

TEST(CudaSamplingMask, RowsAreIndependent) {
  DUET_REQUIRE_GPU();
  const std::vector<Row> rows = make_rows(4099, 3);
  const auto together = run(rows, true, {});
  for (size_t k = 0; k < rows.size(); k += 5) {
    EXPECT_EQ(run({rows[k]}, true, {})[0].id, together[k].id) << "row " << k << " alone";
  }
  std::vector<Row> unmasked;
  std::vector<size_t> where;
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k].mask.empty()) unmasked.push_back(rows[k]), where.push_back(k);
  const auto without = run(unmasked, true, {});
  for (size_t j = 0; j < unmasked.size(); ++j) EXPECT_EQ(without[j].id, together[where[j]].id);
}

TEST(CudaSamplingMask, PlantedKernelIgnoringMasksIsCaught) {
  DUET_REQUIRE_GPU();
  const std::vector<Row> rows = make_rows(4099, 5);
  const auto got = run(rows, false, {});
  int outside = 0;
  for (size_t k = 0; k < rows.size(); ++k) outside += !allowed(rows[k], got[k].id);
  EXPECT_GT(outside, 10);
}

}  // namespace
}  // namespace duet::backend::cuda

namespace duet::backend::cuda {
namespace {

// The rows sampled on `stream` as a masked step of the CUDA backend samples them: each row's mask placed at a 16-byte
// aligned offset of the upload's words, the host writing them into the staging words, the copy sent on the upload's
// own stream and the sampler waiting for it. copy_first: the planted fault (DUET_TEST_MASKS_AFTER_COPY), the copy sent
// and done before the host writes the masks.
std::vector<DeviceSample> run_through_upload(const std::vector<Row>& rows, MaskUpload& upload, cudaStream_t stream,
                                             bool copy_first) {
  const auto vocab = static_cast<int32_t>(rows.front().logits.size());
  std::vector<float> logits;
  std::vector<SamplingRowParams> params;
  size_t words = 0;
  for (const Row& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    SamplingRowParams p = row_params(r, static_cast<int32_t>(params.size()));
    if (!r.mask.empty()) {
      p.mask_offset = static_cast<int64_t>(words);
      p.mask_words = static_cast<int32_t>(r.mask.size());
      words += (r.mask.size() + 3) / 4 * 4;
    }
    params.push_back(p);
  }
  const auto n = static_cast<int32_t>(rows.size());
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<SamplingRowParams> d_params(params);
  DeviceBuffer<uint32_t> d_counts(count_words(rows));
  DeviceBuffer<DeviceSample> d_out(static_cast<size_t>(n));
  const size_t bytes = sampling_scratch_bytes(n, vocab);
  DeviceBuffer<unsigned char> scratch(bytes);
  upload.arrange(words);
  if (copy_first) {
    upload.send(words, stream);
    upload.wait_sent();
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    if (rows[k].mask.empty()) continue;
    const std::span<uint32_t> staged = upload.staging(static_cast<size_t>(params[k].mask_offset), rows[k].mask.size());
    std::copy(rows[k].mask.begin(), rows[k].mask.end(), staged.begin());
  }
  if (!copy_first) upload.send(words, stream);
  launch_sample(d_logits.get(), n, vocab, d_params.get(), PenaltyTables{d_counts.get(), vocab}, d_out.get(), nullptr,
                scratch.get(), bytes, stream, {}, upload.device());
  upload.read_by(stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return d_out.download();
}

// Four rounds on the real-size vocabulary (248,320 columns: a copy of tens of microseconds, which a sampler started
// early would overtake), 12, 24, 36 and 48 rows with new logits and masks each (the buffers grow, and move, between
// rounds): every draw equals the CPU sampler's under its round's masks. Then the planted fault over the same rounds:
// draws under the last round's masks must differ from the CPU's, or the check could not see a stale mask.
TEST(CudaSamplingMask, MaskUploadFeedsTheSamplerWhatTheHostWrote) {
  DUET_REQUIRE_GPU();
  constexpr int32_t kVocab = 248320;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<std::vector<Row>> rounds;
  for (int r = 1; r <= 4; ++r) rounds.push_back(make_rows(kVocab, 100 + static_cast<uint32_t>(r), 12 * r));
  for (const bool copy_first : {false, true}) {
    MaskUpload upload;
    int differing = 0, outside = 0;
    for (size_t r = 0; r < rounds.size(); ++r) {
      const std::vector<Row>& rows = rounds[r];
      const auto got = run_through_upload(rows, upload, stream, copy_first);
      for (size_t k = 0; k < rows.size(); ++k) {
        const Row& row = rows[k];
        const auto want = engine::sample_token(row.logits, row.params, counts_of(row), row.position, row.mask);
        differing += got[k].id != want.id ? 1 : 0;
        outside += allowed(row, got[k].id) ? 0 : 1;
        if (!copy_first) {
          EXPECT_EQ(got[k].id, want.id) << "round " << r << " row " << k;
        }
      }
    }
    if (copy_first) {
      EXPECT_GT(outside, 10) << "the planted fault (the copy before the host wrote the masks) drew only allowed ids: "
                                "the test cannot see a stale mask";
    } else {
      EXPECT_EQ(differing, 0) << differing << " draws differ from the CPU sampler's under the masks the host wrote";
      EXPECT_EQ(outside, 0) << outside << " draws outside the masks the host wrote";
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace duet::backend::cuda
