#pragma once
// What the engine will hold in memory, computed before anything is allocated, so a configuration that does
// not fit is refused at start with the numbers instead of failing mid-request.
#include <cstddef>
#include <cstdint>
#include <string>

namespace duet::model {
class Model;
}

namespace duet::engine {

struct EngineOptions;

struct MemoryPlan {
  size_t weight_bytes = 0;
  int32_t context = 0;          // positions per sequence
  int64_t model_positions = 0;  // the model's max_position_embeddings (0: not given)
  size_t adapter_bytes = 0;     // a runtime adapter's factors (--clef), beside the weights
  int32_t sequences = 0;        // parallel
  // fixed per slot: GDN conv + delta-rule state, the penalties' token counts (+ rewind copies, drafting)
  size_t state_bytes_per_sequence = 0;
  int64_t kv_pages = 0;  // the shared KV page pool
  int32_t kv_page_positions = 0;
  size_t kv_page_bytes = 0;
  size_t state_pool_bytes = 0;  // sequences * state_bytes_per_sequence + kv_pages * kv_page_bytes
  // The prompt cache (--prompt-cache-gib): GDN snapshots (state_bytes_per_sequence each) and KV pages beside the pool.
  int64_t prompt_cache_snapshots = 0;
  int64_t prompt_cache_pages = 0;
  size_t prompt_cache_bytes = 0;
  size_t prompt_cache_decision_bytes = 0;  // of prompt_cache_bytes: decisions' kept memory rows, beside their pages
  // Its host tier (--prompt-cache-host-gib): snapshots and pages the device tier lets go, in host memory (RAM even
  // when the rest is on a GPU). One of the snapshots is kept free for swaps (engine/prompt_cache_host.h): at least two.
  int64_t prompt_cache_host_snapshots = 0;
  int64_t prompt_cache_host_pages = 0;
  size_t prompt_cache_host_bytes = 0;
  size_t workspace_bytes = 0;  // an estimate of one step's activations and logits
  size_t decision_bytes = 0;   // a joint head's weights + every slot's head memory and each running head's scratch
  size_t decision_device_bytes = 0;  // on a GPU: the head's products, fp32 weights + one context's rows in and out
  // The vision tower (EngineOptions::vision, model/vision_model.h plan_bytes()): on the GPU its weights and scratch,
  // taken before the plan reads the GPU's free memory (so outside the limit and the total, shown); on the host its
  // weights and one largest image's activations, in the total (in RAM beside a GPU plan: shown).
  size_t vision_bytes = 0;
  bool vision_on_device = false;
  size_t total_bytes = 0;
  size_t limit_bytes = 0;
  bool on_device = false;       // the limit is a GPU's memory (free + held by the model), not the host's RAM
  size_t host_limit_bytes = 0;  // on a GPU: physical RAM, which the host tier and decisions must fit in

  std::string describe() const;  // one line with every number, for the start log and the refusal
};

// Physical RAM (sysconf), the default limit.
size_t physical_memory_bytes();

// KV pages the options ask for: kv_cache_tokens rounded up to whole pages, or parallel * context's worth.
int64_t planned_kv_pages(const model::Model& model, const EngineOptions& options);
// The most rows one step can have (the scheduler's budget plus a chunk and a decode row per sequence of slack).
int64_t max_step_rows(const EngineOptions& options);
// The most rows of one verify piece with drafts on: the last token and the drafts after it.
int64_t verify_rows(const EngineOptions& options);
MemoryPlan plan_memory(const model::Model& model, const EngineOptions& options);
// The context a server gets when none is asked: the model's max_position_embeddings (4096 when config.json has none),
// bounded by the KV cache when kv_cache_tokens sets its size, and by memory: the largest whole number of KV pages
// per sequence whose plan fits. When not even one page fits, the model's length is returned and the plan's refusal
// names the numbers.
int32_t default_context(const model::Model& model, EngineOptions options);
// Throws duet::Error naming the numbers when total_bytes exceeds limit_bytes.
void check_memory_plan(const MemoryPlan& plan);

}  // namespace duet::engine
