#include "backend/cpu/cpu_state.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <optional>

#include "backend/cpu/cpu_host_tier.h"
#include "base/error.h"

namespace duet::backend::cpu {

CpuGdnState::CpuGdnState(const GdnShape& s)
    : shape(s),
      conv_history(static_cast<size_t>((s.conv_kernel - 1) * s.conv_channels())),
      boundary_states(static_cast<size_t>(s.value_heads * s.key_dim * s.value_dim)),
      chunk_keys(static_cast<size_t>(s.value_heads * kDeltaRuleChunk * s.key_dim)),
      chunk_cum_decay(static_cast<size_t>(s.value_heads * kDeltaRuleChunk)),
      chunk_values(static_cast<size_t>(s.value_heads * kDeltaRuleChunk * s.value_dim)) {}

size_t CpuGdnState::bytes_for(const GdnShape& s) {
  const int64_t floats = (s.conv_kernel - 1) * s.conv_channels() + s.value_heads * s.key_dim * s.value_dim +
                         s.value_heads * kDeltaRuleChunk * (s.key_dim + 1 + s.value_dim);
  return static_cast<size_t>(floats) * sizeof(float);
}

void CpuGdnState::reset() {
  // Chunk rows beyond `position % 64` are never read, so only the history and the boundary state need zeroing.
  std::fill(conv_history.begin(), conv_history.end(), 0.0f);
  std::fill(boundary_states.begin(), boundary_states.end(), 0.0f);
  position = 0;
}

DeltaRuleHead CpuGdnState::head(int64_t h) {
  return DeltaRuleHead{boundary_states.data() + h * shape.key_dim * shape.value_dim,
                       chunk_keys.data() + h * kDeltaRuleChunk * shape.key_dim,
                       chunk_cum_decay.data() + h * kDeltaRuleChunk,
                       chunk_values.data() + h * kDeltaRuleChunk * shape.value_dim};
}

ZeroedFloats::ZeroedFloats(size_t count) : data_(static_cast<float*>(std::calloc(std::max<size_t>(count, 1), 4))) {
  static_assert(sizeof(float) == 4);
  if (!data_) throw std::bad_alloc();
}
void ZeroedFloats::Free::operator()(float* p) const { std::free(p); }

CpuKvPages::CpuKvPages(const AttentionShape& s, int64_t layers, int64_t pages) : shape(s), pages_(pages) {
  const auto floats = static_cast<size_t>(pages * kKvPagePositions * s.kv_heads * s.head_dim);
  for (int64_t layer = 0; layer < layers; ++layer) {
    keys.emplace_back(floats);
    values.emplace_back(floats);
  }
}

CpuStateStorage::CpuStateStorage(const Backend* owner, const GdnShape& gdn, int64_t gdn_layers, int64_t slots,
                                 const AttentionShape& attention, int64_t attention_layers, int64_t pages,
                                 int64_t snapshots)
    : StateStorage(owner),
      kv(attention, attention_layers, pages),
      gdn_layers_(gdn_layers),
      slots_(slots),
      snapshots_(snapshots),
      snapshot_(gdn, snapshots * gdn_layers) {
  gdn_.reserve(static_cast<size_t>(slots * gdn_layers));
  for (int64_t i = 0; i < slots * gdn_layers; ++i) gdn_.emplace_back(gdn);
  rewind_.resize(static_cast<size_t>(slots * gdn_layers));
}

size_t CpuStateStorage::bytes() const {
  const size_t states = gdn_.size() + snapshot_.size();
  return kv.bytes() + states * CpuGdnState::bytes_for(snapshot_.shape());
}

void CpuStateStorage::check_slot(int32_t slot) const {
  if (slot < 0 || slot >= slots_) fail("cpu state: slot {} of a storage with {} slots", slot, slots_);
}

void CpuStateStorage::check_snapshot(int32_t snapshot) const {
  if (snapshot < 0 || snapshot >= snapshots_)
    fail("cpu state: snapshot {} of a storage with {} snapshots", snapshot, snapshots_);
}

// Whole CpuGdnState copies: the chunk scratch beyond position % 64 is never read, and at a block end none is pending.
void CpuStateStorage::save_snapshot(int32_t slot, int32_t snapshot) {
  check_slot(slot), check_snapshot(snapshot);
  for (int64_t l = 0; l < gdn_layers_; ++l) snapshot_[static_cast<size_t>(snapshot * gdn_layers_ + l)] = gdn(slot, l);
}

void CpuStateStorage::restore_snapshot(int32_t snapshot, int32_t slot) {
  check_slot(slot), check_snapshot(snapshot);
  for (int64_t l = 0; l < gdn_layers_; ++l) {
    gdn(slot, l) = snapshot_[static_cast<size_t>(snapshot * gdn_layers_ + l)];
    gdn_rewind(slot, l).start = -1;
  }
}

std::vector<std::byte> CpuStateStorage::snapshot_bytes(int32_t snapshot) const {
  check_snapshot(snapshot);
  std::vector<std::byte> out;
  auto append = [&out](const auto& values) {
    const auto* bytes = reinterpret_cast<const std::byte*>(values.data());
    out.insert(out.end(), bytes, bytes + values.size() * sizeof(values[0]));
  };
  for (int64_t l = 0; l < gdn_layers_; ++l) {
    std::optional<CpuGdnState> zeros;  // a state never used reads as a new one
    const CpuGdnState* made = snapshot_.made(static_cast<size_t>(snapshot * gdn_layers_ + l));
    const CpuGdnState& state = made != nullptr ? *made : zeros.emplace(snapshot_.shape());
    append(state.conv_history), append(state.boundary_states), append(state.chunk_keys);
    append(state.chunk_cum_decay), append(state.chunk_values);
    append(std::span(&state.position, 1));
  }
  return out;
}

std::unique_ptr<HostStateTier> CpuStateStorage::new_host_tier(int64_t snapshots, int64_t pages) {
  return std::make_unique<CpuHostTier>(*this, snapshots, pages);
}

void CpuStateStorage::prepare_counts(int32_t vocab) {
  if (vocab <= 0) fail("cpu state: penalty counts for a vocabulary of {} ids", vocab);
  counts_vocab_ = vocab;
  counts_.assign(static_cast<size_t>(slots_), PenaltyCounts{});
}

void CpuStateStorage::update_counts(std::span<const CountsUpdate> updates) {
  if (counts_vocab_ == 0) fail("cpu state: penalty counts updated before prepare_counts");
  apply_counts_updates(updates, counts_vocab_, counts_);
}

const PenaltyCounts& CpuStateStorage::counts(int32_t slot) const {
  if (counts_vocab_ == 0) fail("cpu state: a row reads the penalty counts of slot {} before prepare_counts", slot);
  check_slot(slot);
  return counts_[static_cast<size_t>(slot)];
}

void CpuStateStorage::reset_slot(int32_t slot) {
  for (int64_t l = 0; l < gdn_layers_; ++l) gdn(slot, l).reset(), gdn_rewind(slot, l).start = -1;
}

DeltaRuleHead CpuGdnRewind::head(const GdnShape& s, int64_t h) {
  const auto size = [](std::vector<float>& v, int64_t n) {
    if (v.size() != static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
  };
  return DeltaRuleHead{
      size(boundary_states, s.value_heads * s.key_dim * s.value_dim) + h * s.key_dim * s.value_dim,
      size(chunk_keys, s.value_heads * kDeltaRuleChunk * s.key_dim) + h * kDeltaRuleChunk * s.key_dim,
      size(chunk_cum_decay, s.value_heads * kDeltaRuleChunk) + h * kDeltaRuleChunk,
      size(chunk_values, s.value_heads * kDeltaRuleChunk * s.value_dim) + h * kDeltaRuleChunk * s.value_dim};
}

void CpuStateStorage::rewind(int32_t slot, int64_t position) {
  check_slot(slot);
  for (int64_t l = 0; l < gdn_layers_; ++l) {
    CpuGdnState& state = gdn(slot, l);
    CpuGdnRewind& kept = gdn_rewind(slot, l);
    if (kept.start < 0 || position < kept.start || position > kept.start + kept.rows)
      fail("cpu state: slot {} cannot rewind to position {}: its last step was not a rewindable one that ran it", slot,
           position);
    const int64_t channels = state.shape.conv_channels(), history = state.shape.conv_kernel - 1;
    const auto kept_rows = position - kept.start;
    std::copy_n(kept.conv_window.begin() + kept_rows * channels, history * channels, state.conv_history.begin());
    if (kept.folded_at >= 0 && position < kept.folded_at) {  // back into the chunk the step completed
      state.boundary_states = kept.boundary_states;
      state.chunk_keys = kept.chunk_keys;
      state.chunk_cum_decay = kept.chunk_cum_decay;
      state.chunk_values = kept.chunk_values;
    }
    state.position = position;
    kept.start = -1;  // once: the state is that of a step that ran `kept_rows` rows
  }
}

void CpuStateStorage::copy_slot(int32_t from, int32_t to) {
  check_slot(from), check_slot(to);
  if (from == to) return;
  for (int64_t l = 0; l < gdn_layers_; ++l) {
    gdn(to, l) = gdn(from, l);  // same shapes: the vectors keep their memory
    gdn_rewind(to, l).start = -1;
  }
}

void CpuStateStorage::copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) {
  if (from.size() != to.size()) fail("cpu state: copying {} KV pages onto {}", from.size(), to.size());
  for (size_t i = 0; i < from.size(); ++i) kv.copy_page(from[i], to[i]);
}

void CpuKvPages::copy_page(int32_t from, int32_t to) {
  const auto floats = static_cast<std::ptrdiff_t>(kKvPagePositions * shape.kv_heads * shape.head_dim);
  for (auto* layers : {&keys, &values})
    for (ZeroedFloats& layer : *layers) std::copy_n(layer.data() + from * floats, floats, layer.data() + to * floats);
}

size_t CpuKvPages::page_bytes(const AttentionShape& s) {
  return static_cast<size_t>(2 * kKvPagePositions * s.kv_heads * s.head_dim) * sizeof(float);
}

}  // namespace duet::backend::cpu
