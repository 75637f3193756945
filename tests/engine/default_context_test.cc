// `duet serve` without --context: the model's max_position_embeddings, bounded by the KV cache's size and by memory
// (the most whole pages per sequence whose memory plan fits), as engine::default_context computes it.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "fake_model.h"

namespace duet::engine {
namespace {

// The fake model with a model length of its own.
class LongModel : public testing::FakeModel {
 public:
  explicit LongModel(int64_t max_positions) : config_(FakeModel::config()) {
    config_.max_position_embeddings = max_positions;
  }
  const model::Qwen35Config& config() const override { return config_; }

 private:
  model::Qwen35Config config_;
};

EngineOptions options_with_limit(size_t limit_bytes) {
  EngineOptions options;
  options.parallel = 4;
  options.memory_limit_bytes = limit_bytes;
  return options;
}

TEST(DefaultContext, IsTheModelsLengthWhenItFits) {
  LongModel model(262144);
  EXPECT_EQ(default_context(model, options_with_limit(size_t{1} << 40)), 262144);
  LongModel unknown(0);  // a config.json without max_position_embeddings
  EXPECT_EQ(default_context(unknown, options_with_limit(size_t{1} << 40)), 4096);
}

TEST(DefaultContext, IsBoundedByTheKvCacheSize) {
  LongModel model(262144);
  EngineOptions options = options_with_limit(size_t{1} << 40);
  options.kv_cache_tokens = 10000;
  EXPECT_EQ(default_context(model, options), 10000);
}

TEST(DefaultContext, IsTheMostWholePagesThatFitMemory) {
  LongModel model(262144);
  // Room for the weights, the workspace and about 1000 KV pages in all: 250 per sequence.
  EngineOptions probe = options_with_limit(0);
  probe.context = 64;
  const MemoryPlan small = plan_memory(model, probe);
  const size_t limit = small.total_bytes + 1000 * small.kv_page_bytes;
  EngineOptions options = options_with_limit(limit);
  const int32_t context = default_context(model, options);
  EXPECT_EQ(context % 64, 0);
  EXPECT_LT(context, 262144);
  EXPECT_GT(context, 64 * 200);
  options.context = context;
  EXPECT_LE(plan_memory(model, options).total_bytes, limit);
  options.context = context + 64;
  EXPECT_GT(plan_memory(model, options).total_bytes, limit);
  // And the engine starts with it.
  options.context = context;
  Engine engine(model, nullptr, options);
  EXPECT_EQ(engine.stats().kv_pages_total, 4 * (context / 64));
}

}  // namespace
}  // namespace duet::engine
