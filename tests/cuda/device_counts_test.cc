// The CUDA storage's penalty counts (backend/cuda/device_counts.h) against the host's (backend/penalty_counts.h,
// apply_counts_updates: what the CPU backend keeps): random batches of clears, prompt marks and generated counts, with
// ids repeated inside a batch and slots cleared and refilled in one batch, must leave every word as the host's. The
// control: the batches are ones where applying the updates in plain order (a clear after its slot's adds) gives other
// words, so a device that did not clear first would show. A bad update refuses its whole batch.
#include "backend/cuda/device_counts.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/penalty_counts.h"
#include "base/error.h"
#include "cuda_test_util.h"

namespace duet::backend::cuda {
namespace {

using Kind = CountsUpdate::Kind;

// The host counts as dense words [slots, vocab].
std::vector<uint32_t> dense(const std::vector<PenaltyCounts>& host, int32_t vocab) {
  std::vector<uint32_t> words(host.size() * static_cast<size_t>(vocab), 0u);
  for (size_t slot = 0; slot < host.size(); ++slot)
    for (const auto& [id, word] : host[slot].words()) words[slot * vocab + static_cast<size_t>(id)] = word;
  return words;
}

// A batch: mostly adds over a few hot ids (repeats), and now and then a clear placed after some adds of its slot.
std::vector<CountsUpdate> random_batch(std::mt19937_64& rng, int32_t slots, int32_t vocab) {
  std::vector<CountsUpdate> batch;
  const size_t size = 1 + rng() % 300;
  for (size_t i = 0; i < size; ++i) {
    const auto slot = static_cast<int32_t>(rng() % slots);
    const auto id = static_cast<int32_t>(rng() % 4 == 0 ? rng() % 8 : rng() % vocab);
    const uint64_t r = rng() % 100;
    batch.push_back({slot, id, r < 2 ? Kind::clear : r < 40 ? Kind::prompt : Kind::generated});
  }
  return batch;
}

TEST(DeviceCounts, UpdatesEqualTheHostCounts) {
  DUET_REQUIRE_GPU();
  constexpr int32_t kSlots = 5, kVocab = 1000;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    DeviceCounts device(kSlots, kVocab, stream);
    std::vector<PenaltyCounts> host(kSlots);
    std::mt19937_64 rng(12);
    int order_matters = 0;
    for (int b = 0; b < 60; ++b) {
      const std::vector<CountsUpdate> batch = random_batch(rng, kSlots, kVocab);
      // The control: the same batch in plain order, on a copy of the host counts.
      std::vector<PenaltyCounts> in_order = host;
      for (const CountsUpdate& u : batch)
        if (u.kind == Kind::clear)
          in_order[u.slot].clear();
        else
          in_order[u.slot].add(u.kind, u.id);
      apply_counts_updates(batch, kVocab, host);
      device.update(batch);
      order_matters += dense(in_order, kVocab) != dense(host, kVocab);
      ASSERT_EQ(device.read(), dense(host, kVocab)) << "batch " << b;
    }
    EXPECT_GT(order_matters, 5) << "too few batches where clearing first mattered: the test could not see it";
    // A bad update refuses its whole batch: nothing of it applies.
    const std::vector<uint32_t> before = device.read();
    const CountsUpdate bad[] = {{0, 3, Kind::generated}, {1, 0, Kind::clear}, {2, kVocab, Kind::prompt}};
    EXPECT_THROW(device.update(bad), Error);
    const CountsUpdate bad_slot[] = {{0, 3, Kind::generated}, {kSlots, 0, Kind::prompt}};
    EXPECT_THROW(device.update(bad_slot), Error);
    EXPECT_EQ(device.read(), before);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace duet::backend::cuda
