#include "backend/cpu/cpu_host_tier.h"

#include <algorithm>

#include "base/error.h"

namespace duet::backend::cpu {

CpuHostTier::CpuHostTier(CpuStateStorage& storage, int64_t snapshots, int64_t pages)
    : storage_(storage),
      snapshots_(snapshots),
      pages_(pages),
      page_floats_(static_cast<size_t>(kKvPagePositions * storage.kv.shape.kv_heads * storage.kv.shape.head_dim)),
      kv_(static_cast<size_t>(std::max<int64_t>(pages, 0)) * storage.kv.keys.size() * 2 * page_floats_),
      gdn_(storage.gdn_shape(), std::max<int64_t>(snapshots, 0) * storage.gdn_layers()) {
  if (snapshots < 0 || pages < 0) fail("cpu host tier: {} snapshots and {} pages", snapshots, pages);
  if (storage.gdn_layers() > 0 && storage.snapshots() == 0)
    fail("cpu host tier: the storage has no device snapshots to take GDN states from");
}

size_t CpuHostTier::bytes() const {
  const size_t states = gdn_.size() * CpuGdnState::bytes_for(gdn_.shape());
  return states + static_cast<size_t>(pages_) * storage_.kv.keys.size() * 2 * page_floats_ * sizeof(float);
}

void CpuHostTier::check_host_snapshot(int32_t host) const {
  if (host < 0 || host >= snapshots_) fail("cpu host tier: snapshot {} of {}", host, snapshots_);
}

float* CpuHostTier::host_page(int32_t host, size_t layer, bool value) const {
  if (host < 0 || host >= pages_) fail("cpu host tier: page {} of {}", host, pages_);
  const size_t layers = storage_.kv.keys.size();
  return kv_.data() + ((static_cast<size_t>(host) * layers + layer) * 2 + (value ? 1 : 0)) * page_floats_;
}

// Whole CpuGdnState copies, as the device tier's save_snapshot makes them.
void CpuHostTier::save_snapshot(int32_t snapshot, int32_t host) {
  check_host_snapshot(host);
  const int64_t layers = storage_.gdn_layers();
  for (int64_t l = 0; l < layers; ++l)
    gdn_[static_cast<size_t>(host * layers + l)] = storage_.snapshot_gdn(snapshot, l);
}

void CpuHostTier::restore_snapshot(int32_t host, int32_t snapshot) {
  check_host_snapshot(host);
  const int64_t layers = storage_.gdn_layers();
  for (int64_t l = 0; l < layers; ++l)
    storage_.snapshot_gdn(snapshot, l) = gdn_[static_cast<size_t>(host * layers + l)];
}

void CpuHostTier::save_pages(std::span<const int32_t> pages, std::span<const int32_t> host) {
  if (pages.size() != host.size()) fail("cpu host tier: {} KV pages into {} host pages", pages.size(), host.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= storage_.kv.count()) fail("cpu host tier: KV page {}", pages[i]);
    for (size_t l = 0; l < storage_.kv.keys.size(); ++l) {
      std::copy_n(storage_.kv.key(static_cast<int64_t>(l), pages[i], 0, 0), page_floats_, host_page(host[i], l, false));
      std::copy_n(storage_.kv.value(static_cast<int64_t>(l), pages[i], 0, 0), page_floats_,
                  host_page(host[i], l, true));
    }
  }
}

void CpuHostTier::restore_pages(std::span<const int32_t> host, std::span<const int32_t> pages) {
  if (pages.size() != host.size()) fail("cpu host tier: {} host pages into {} KV pages", host.size(), pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= storage_.kv.count()) fail("cpu host tier: KV page {}", pages[i]);
    for (size_t l = 0; l < storage_.kv.keys.size(); ++l) {
      std::copy_n(host_page(host[i], l, false), page_floats_, storage_.kv.key(static_cast<int64_t>(l), pages[i], 0, 0));
      std::copy_n(host_page(host[i], l, true), page_floats_,
                  storage_.kv.value(static_cast<int64_t>(l), pages[i], 0, 0));
    }
  }
}

}  // namespace duet::backend::cpu
