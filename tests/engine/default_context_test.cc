// `duet serve` without --context: the model's max_position_embeddings, bounded by the KV cache's size and by memory
// (the most whole pages per sequence whose memory plan fits), as engine::default_context computes it.
#include <gtest/gtest.h>

#include "base/error.h"
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

// A model on a GPU: the plan's limit is that device's memory, and a decision head's products count there.
class DeviceModel : public LongModel {
 public:
  DeviceModel() : LongModel(65536) {}
  size_t device_memory_bytes() const override { return size_t{80} << 30; }
};

// Clef-Flash's head: 121.8M parameters, its linears about 487 MiB in fp32, products up to 4096 wide in and out.
EngineOptions with_a_head(EngineOptions options) {
  options.decision_head_bytes = size_t{244} << 20;  // as stored, BF16: host memory
  options.decision_bytes_per_position = 1024 * sizeof(float);
  options.decision_device_weight_bytes = size_t{487} << 20;
  options.decision_device_bytes_per_position = (4096 + 4096) * sizeof(float);
  return options;
}

TEST(DecisionHeadOnTheGpu, ItsProductsCountInThePlanAndAStartThatCannotHoldThemIsRefused) {
  DeviceModel model;
  EngineOptions options = options_with_limit(0);
  options.context = 4096;
  const MemoryPlan without = plan_memory(model, options);
  ASSERT_TRUE(without.on_device);
  EXPECT_EQ(without.decision_device_bytes, 0u);
  options = with_a_head(options);
  const MemoryPlan with = plan_memory(model, options);
  EXPECT_EQ(with.decision_device_bytes, (size_t{487} << 20) + 4096 * (4096 + 4096) * sizeof(float));
  EXPECT_EQ(with.total_bytes, without.total_bytes + with.decision_device_bytes);  // the host part is not the GPU's
  EXPECT_NE(with.describe().find("decision head products"), std::string::npos) << with.describe();

  // A device budget that holds the model's plan but not the head's products: refused at start, with the numbers.
  options.memory_limit_bytes = without.total_bytes + with.decision_device_bytes / 2;
  try {
    Engine engine(model, nullptr, options);
    FAIL() << "started with a plan over its limit: " << plan_memory(model, options).describe();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decision head products"), std::string::npos) << e.what();
  }
  // The same budget without the head starts (the refusal was the head's).
  EngineOptions no_head = options_with_limit(options.memory_limit_bytes);
  no_head.context = 4096;
  Engine engine(model, nullptr, no_head);
}

TEST(DecisionHeadOnTheGpu, TheHostBackendKeepsTheHeadInRam) {
  // The planted control: on a host backend nothing runs on a GPU, so no products are counted there; the head's host
  // memory (weights and head memory rows) is in the total instead.
  LongModel model(65536);
  EngineOptions options = with_a_head(options_with_limit(0));
  options.context = 4096;
  const MemoryPlan plan = plan_memory(model, options);
  EXPECT_FALSE(plan.on_device);
  EXPECT_EQ(plan.decision_device_bytes, 0u);
  EXPECT_GT(plan.decision_bytes, options.decision_head_bytes);
  EXPECT_EQ(plan.total_bytes, plan_memory(model,
                                          [] {
                                            EngineOptions o = options_with_limit(0);
                                            o.context = 4096;
                                            return o;
                                          }())
                                      .total_bytes +
                                  plan.decision_bytes);
}

TEST(DecisionHeadOnTheGpu, TheDefaultContextLeavesRoomForTheProducts) {
  DeviceModel model;
  EngineOptions probe = options_with_limit(0);
  probe.context = 64;
  const size_t limit =
      plan_memory(model, probe).total_bytes + 2000 * plan_memory(model, probe).kv_page_bytes + (size_t{600} << 20);
  const int32_t alone = default_context(model, options_with_limit(limit));
  EngineOptions options = with_a_head(options_with_limit(limit));
  const int32_t with_head = default_context(model, options);
  EXPECT_LT(with_head, alone);
  options.context = with_head;
  EXPECT_LE(plan_memory(model, options).total_bytes, limit);
  Engine engine(model, nullptr, options);  // and it starts
}

}  // namespace
}  // namespace duet::engine
