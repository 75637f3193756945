#pragma once
// A runtime adapter (spec/systemone.md, "Runtime adapter"; the folder format in checkpoint/adapter_format.h) bound
// to the projections of the base it serves with: decisions run y = x W^T + (x A^T) B^T on every adapted projection,
// chat runs the base alone. Opening checks the whole folder before any weight reaches the backend and refuses by
// name: a file whose sha256 is not the listed one, a manifest of another format or convention, a module the base has
// no projection for, a factor whose dtype or shape does not fit the base's widths, factors missing from the manifest
// or the manifest's modules missing from the factors, and lm_head_rows.safetensors unequal to the base's head.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/qwen35_config.h"
#include "model/qwen35_weights.h"

namespace duet::model {

// One projection of a layer an adapter may cover: its module name (checkpoint/adapter_format.h), the base weight
// and the factors the adapter fills in.
struct AdaptableProjection {
  std::string module;
  const backend::Weight* weight;
  backend::LoraFactors* lora;
};
std::vector<AdaptableProjection> adaptable_projections(Qwen35LayerWeights& layer);

class RuntimeAdapter {
 public:
  // `base` is the base's bound weights (host views); its projections give the widths every factor must fit.
  static std::unique_ptr<RuntimeAdapter> open(const std::string& folder, const Qwen35Weights& base);

  // Sets the LoraFactors of every module the adapter covers (views into the mapped adapter.safetensors).
  void bind(Qwen35Weights& weights) const;

  const std::string& folder() const { return folder_; }
  size_t bytes() const { return bytes_; }  // of every factor, as stored
  int64_t modules() const { return modules_; }
  int64_t max_rank() const { return max_rank_; }

 private:
  RuntimeAdapter(std::string folder, checkpoint::Checkpoint factors)
      : folder_(std::move(folder)), factors_(std::move(factors)) {}

  std::string folder_;
  checkpoint::Checkpoint factors_;  // adapter.safetensors, mapped; the bound factors point into it
  size_t bytes_ = 0;
  int64_t modules_ = 0;
  int64_t max_rank_ = 0;
};

}  // namespace duet::model
