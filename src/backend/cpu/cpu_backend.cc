// The reference backend: fp32 on the CPU. Sublayers live in their own files; this one wires them to the interface.
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_state.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/mixers.h"
#include "backend/cpu/norms.h"
#include "backend/cpu/weight_rows.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace duet::backend {

namespace {

using cpu::CpuActivations;

const CpuActivations& cpu_of(const Activations& a) { return static_cast<const CpuActivations&>(a); }
CpuActivations& cpu_of(Activations& a) { return static_cast<CpuActivations&>(a); }

template <typename State>
std::vector<State*> states_of(std::span<LayerState* const> states) {
  std::vector<State*> typed;
  for (LayerState* s : states) {
    auto* t = dynamic_cast<State*>(s);
    if (t == nullptr) fail("cpu backend: a layer state of the wrong kind was passed");
    typed.push_back(t);
  }
  return typed;
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  std::unique_ptr<Activations> new_activations(int64_t rows, int64_t width) override {
    return std::make_unique<CpuActivations>(rows, width);
  }
  std::unique_ptr<LayerState> new_gdn_state(const GdnShape& shape) override {
    return std::make_unique<cpu::CpuGdnState>(shape);
  }
  size_t gdn_state_bytes(const GdnShape& shape) const override { return cpu::CpuGdnState::bytes_for(shape); }
  std::unique_ptr<KvPages> new_kv_pages(const AttentionShape& shape, int64_t layers, int64_t pages) override {
    return std::make_unique<cpu::CpuKvPages>(shape, layers, pages);
  }
  size_t kv_page_bytes(const AttentionShape& shape) const override { return cpu::CpuKvPages::page_bytes(shape); }
  std::unique_ptr<LayerState> new_kv_cache(KvPages& pages, int64_t layer,
                                           const std::vector<int32_t>& page_table) override {
    auto* cpu_pages = dynamic_cast<cpu::CpuKvPages*>(&pages);
    if (cpu_pages == nullptr) fail("cpu backend: KV pages of another backend were passed");
    if (layer < 0 || layer >= static_cast<int64_t>(cpu_pages->keys.size()))
      fail("cpu backend: attention layer {} of KV pages for {} layers", layer, cpu_pages->keys.size());
    return std::make_unique<cpu::CpuKvCache>(*cpu_pages, layer, page_table);
  }

  void embed(const Weight& table, std::span<const int32_t> ids, Activations& out) override {
    auto& o = cpu_of(out);
    for (size_t r = 0; r < ids.size(); ++r) cpu::weight_to_float(table, ids[r] * table.cols, table.cols, o.row(r));
  }

  void rms_norm(const Activations& x, const Weight& w, double eps, Activations& out) override {
    const auto& in = cpu_of(x);
    auto& o = cpu_of(out);
    global_thread_pool().parallel_for(static_cast<size_t>(in.rows()), [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r)
        cpu::rms_norm_one_plus(in.row(r), in.width(), w, static_cast<float>(eps), o.row(r));
    });
  }

  void add(Activations& x, const Activations& y) override {
    auto& a = cpu_of(x).values;
    const auto& b = cpu_of(y).values;
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  }

  void gdn_mixer(const GdnWeights& w, const GdnShape& shape, const Activations& x, std::span<const PieceRows> pieces,
                 std::span<LayerState* const> states, Activations& out) override {
    const auto typed = states_of<cpu::CpuGdnState>(states);
    cpu::gdn_mixer(w, shape, cpu_of(x), pieces, typed, cpu_of(out));
  }

  void attention_mixer(const AttentionWeights& w, const AttentionShape& shape, const Activations& x,
                       std::span<const PieceRows> pieces, std::span<LayerState* const> states,
                       Activations& out) override {
    const auto typed = states_of<cpu::CpuKvCache>(states);
    for (size_t p = 0; p < pieces.size(); ++p)
      if (pieces[p].start_position + pieces[p].rows > typed[p]->capacity())
        fail("cpu backend: KV pages for {} positions cannot take positions up to {}", typed[p]->capacity(),
             pieces[p].start_position + pieces[p].rows);
    cpu::attention_mixer(w, shape, cpu_of(x), pieces, typed, cpu_of(out));
  }

  void mlp(const MlpWeights& w, const Activations& x, Activations& out) override {
    cpu::mlp(w, cpu_of(x), cpu_of(out));
  }

  void lm_head(const Weight& head, const Activations& x, std::span<const int64_t> rows, float* logits) override {
    const auto& in = cpu_of(x);
    std::vector<float> selected(rows.size() * static_cast<size_t>(in.width()));
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(selected.data() + i * in.width(), in.row(rows[i]), sizeof(float) * in.width());
    cpu::matmul(selected.data(), static_cast<int64_t>(rows.size()), head, logits);
  }

  void read_rows(const Activations& x, int64_t first, int64_t count, float* out) override {
    const auto& in = cpu_of(x);
    std::memcpy(out, in.row(first), sizeof(float) * static_cast<size_t>(count * in.width()));
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace duet::backend
