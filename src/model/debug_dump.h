#pragma once
// DUET_DUMP=dir writes each forward step's named intermediates (step rows as fp32) to dir/step<N>.safetensors:
// "ids", "positions", "hidden.0" (embeddings), "hidden.<k>" (after layer k, as transformers' output_hidden_states),
// "final_norm". tools/ scripts diff them against transformers layer by layer. Off (and free) when unset.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace duet::model {

class DebugDump {
 public:
  DebugDump();  // reads DUET_DUMP
  bool enabled() const { return !folder_.empty(); }
  void begin_step(std::vector<int32_t> ids, std::vector<int32_t> positions);
  void add(backend::Backend& backend, const std::string& name, const backend::Activations& rows);
  void end_step();  // writes the file

 private:
  std::string folder_;
  int64_t step_ = 0;
  std::vector<int32_t> ids_, positions_;
  std::vector<std::pair<std::string, std::vector<float>>> tensors_;
  int64_t width_ = 0;
};

}  // namespace duet::model
