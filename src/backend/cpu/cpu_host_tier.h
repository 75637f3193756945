#pragma once
// The prompt cache's host tier on the CPU backend (backend::HostStateTier). The device tier is host memory here too,
// so this is the same bytes in a second place; what it gives the CPU build is the tier's code path (budgets, eviction,
// restore) run and tested where CI runs, exactly as the CUDA backend's pinned tier is driven.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_state.h"

namespace duet::backend::cpu {

class CpuHostTier final : public HostStateTier {
 public:
  CpuHostTier(CpuStateStorage& storage, int64_t snapshots, int64_t pages);
  int64_t snapshots() const override { return snapshots_; }
  int64_t pages() const override { return pages_; }
  size_t bytes() const override;
  void save_snapshot(int32_t snapshot, int32_t host) override;
  void restore_snapshot(int32_t host, int32_t snapshot) override;
  void save_pages(std::span<const int32_t> pages, std::span<const int32_t> host) override;
  void restore_pages(std::span<const int32_t> host, std::span<const int32_t> pages) override;

 private:
  void check_host_snapshot(int32_t host) const;
  float* host_page(int32_t host, size_t layer, bool value) const;

  CpuStateStorage& storage_;
  int64_t snapshots_, pages_;
  size_t page_floats_;  // one page of one layer's K (or V)
  ZeroedFloats kv_;     // [pages][attention_layers][K | V][64][kv_heads][head_dim]: untouched until used
  LazyGdnStates gdn_;   // [snapshots][gdn_layers], whole states as the device tier keeps them
};

}  // namespace duet::backend::cpu
