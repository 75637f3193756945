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
  size_t state_bytes_per_sequence = 0;
  size_t state_pool_bytes = 0;  // parallel * state_bytes_per_sequence
  size_t workspace_bytes = 0;   // an estimate of one step's activations and logits
  size_t total_bytes = 0;
  size_t limit_bytes = 0;

  std::string describe() const;  // one line with every number, for the start log and the refusal
};

// Physical RAM (sysconf), the default limit.
size_t physical_memory_bytes();

MemoryPlan plan_memory(const model::Model& model, const EngineOptions& options);
// Throws duet::Error naming the numbers when total_bytes exceeds limit_bytes.
void check_memory_plan(const MemoryPlan& plan);

}  // namespace duet::engine
