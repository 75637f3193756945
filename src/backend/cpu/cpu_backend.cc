// The reference backend: fp32 on the CPU. Sublayers live in their own files; this one wires them to the interface.
#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_state.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/mixers.h"
#include "backend/cpu/norms.h"
#include "backend/cpu/sampler.h"
#include "backend/cpu/weight_rows.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace duet::backend {

namespace {

using cpu::CpuActivations;

// Below this vocabulary a row samples in microseconds and waking threads would cost more than it saves.
constexpr size_t kParallelSamplingVocab = 4096;

const CpuActivations& cpu_of(const Activations& a) { return static_cast<const CpuActivations&>(a); }
CpuActivations& cpu_of(Activations& a) { return static_cast<CpuActivations&>(a); }

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  Weight resident(const Weight& w, WeightUse) override { return w; }  // the mapped checkpoint, read in place
  size_t device_memory_bytes() const override { return 0; }

  std::unique_ptr<StateStorage> new_state_storage(const GdnShape& gdn, int64_t gdn_layers, int64_t slots,
                                                  const AttentionShape& attention, int64_t attention_layers,
                                                  int64_t pages, int64_t snapshots) override {
    return std::make_unique<cpu::CpuStateStorage>(this, gdn, gdn_layers, slots, attention, attention_layers, pages,
                                                  snapshots);
  }
  size_t gdn_state_bytes(const GdnShape& shape) const override { return cpu::CpuGdnState::bytes_for(shape); }
  size_t kv_page_bytes(const AttentionShape& shape) const override { return cpu::CpuKvPages::page_bytes(shape); }

  // The CPU's sublayers keep their scratch in vectors of their own; only the step's activations are counted.
  void reserve_workspace(size_t bytes) override { workspace_bytes_ = std::max(workspace_bytes_, bytes); }
  size_t workspace_bytes() const override { return workspace_bytes_; }

  void begin_step(const StepPlan& plan) override {
    if (held_) fail("cpu backend: a step begins while the last one's masks are held (release_masks first)");
    plan_ = plan;
    if (plan.storage == nullptr || plan.storage->owner() != this)
      fail("cpu backend: the step's state storage belongs to another backend");
    storage_ = static_cast<cpu::CpuStateStorage*>(plan.storage);  // made by new_state_storage above
    // The rows that carry the step before's draws read them from where sample() left them; a penalized row's id
    // joins its slot's counts here, as the CUDA backend's carry kernel adds it on the device.
    ids_.assign(plan.ids.begin(), plan.ids.end());
    std::vector<CountsUpdate> carried_counts;
    for (const CarriedId& c : plan.carried) {
      if (c.row < 0 || c.row >= static_cast<int64_t>(ids_.size()) || c.sample < 0 ||
          c.sample >= static_cast<int64_t>(last_draws_.size()))
        fail("cpu backend: row {} of {} carries draw {} of a step that drew {}", c.row, ids_.size(), c.sample,
             last_draws_.size());
      ids_[static_cast<size_t>(c.row)] = last_draws_[static_cast<size_t>(c.sample)];
      if (c.counts_slot >= 0) carried_counts.push_back({c.counts_slot, ids_[static_cast<size_t>(c.row)]});
    }
    if (!carried_counts.empty()) storage_->update_counts(carried_counts);  // checked whole before any applies
    last_draws_.clear();  // a later step may carry only what the step just begun draws
    for (const StepPiece& piece : plan.pieces) {
      const cpu::CpuStateStorage* storage = storage_;
      if (piece.slot < 0 || piece.slot >= storage->slots())
        fail("cpu backend: slot {} of a storage with {} slots", piece.slot, storage->slots());
      if (piece.start_position + piece.rows > static_cast<int64_t>(piece.page_table.size()) * kKvPagePositions)
        fail("cpu backend: KV pages for {} positions cannot take positions up to {}",
             piece.page_table.size() * kKvPagePositions, piece.start_position + piece.rows);
      for (int32_t page : piece.page_table)
        if (page < 0 || page >= storage->pages())
          fail("cpu backend: page {} of a storage with {} pages", page, storage->pages());
    }
  }

  std::unique_ptr<Activations> new_activations(int64_t rows, int64_t width) override {
    return std::make_unique<CpuActivations>(rows, width);
  }

  void embed(const Weight& table, Activations& out) override {
    auto& o = cpu_of(out);
    for (size_t r = 0; r < ids_.size(); ++r) cpu::weight_to_float(table, ids_[r] * table.cols, table.cols, o.row(r));
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

  void gdn_mixer(const GdnWeights& w, const GdnShape& shape, int64_t gdn_layer, const Activations& x,
                 Activations& out) override {
    std::vector<cpu::CpuGdnState*> states;
    std::vector<cpu::CpuGdnRewind*> rewinds;
    std::vector<std::vector<cpu::CpuGdnState*>> snapshots(plan_.pieces.size());
    for (size_t p = 0; p < plan_.pieces.size(); ++p) {
      const StepPiece& piece = plan_.pieces[p];
      states.push_back(&storage_->gdn(piece.slot, gdn_layer));
      rewinds.push_back(&storage_->gdn_rewind(piece.slot, gdn_layer));
      for (const StepSnapshot& s : piece.snapshots)
        snapshots[p].push_back(&storage_->snapshot_gdn(s.snapshot, gdn_layer));
    }
    cpu::gdn_mixer(w, shape, cpu_of(x), plan_.pieces, states, rewinds, snapshots, cpu_of(out));
  }

  void attention_mixer(const AttentionWeights& w, const AttentionShape& shape, int64_t attention_layer,
                       const Activations& x, Activations& out) override {
    std::vector<cpu::CpuKvCache> caches;
    for (size_t i = 0; i < plan_.pieces.size(); ++i)
      caches.push_back(cpu::CpuKvCache{&storage_->kv, attention_layer, plan_.pieces[i].page_table});
    cpu::attention_mixer(w, shape, cpu_of(x), plan_.pieces, caches, cpu_of(out));
  }

  void mlp(const MlpWeights& w, const Activations& x, Activations& out) override {
    cpu::mlp(w, cpu_of(x), plan_.pieces, cpu_of(out));
  }

  void lm_head(const Weight& head, const Activations& x, float* logits) override {
    const auto& in = cpu_of(x);
    const std::span<const int64_t> rows = plan_.logit_rows;
    std::vector<float> selected(rows.size() * static_cast<size_t>(in.width()));
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(selected.data() + i * in.width(), in.row(rows[i]), sizeof(float) * in.width());
    cpu::matmul(selected.data(), static_cast<int64_t>(rows.size()), head, logits);
  }

  bool applies_adapters() const override { return true; }
  bool applies_mrope() const override { return true; }  // cpu/attention_mixer.cc

  // Each sampled row's logits once (a row repeats for its forked choices' draws), then every draw by its own settings
  // (cpu/sampler.h), side by side on the pool: each is a pure function of its row and settings. The masks that come
  // through a MaskWriter are written first, in order, on this thread (the forward has run: there is nothing to overlap
  // them with here), each into a vector of its own that the draw then reads as it reads a given mask.
  void sample(const Weight& head, const Activations& x, SampledRow* out) override {
    Draws draws = logits_of_samples(head, x, out);
    draw(draws, true);
  }

  // Masks held (Backend::hold_masks), as the CUDA backend holds them: the logits now, the masks and draws at
  // release_masks, so that the engine's path of a constrained step launched ahead runs here too (its tests).
  void sample_ahead(const Weight& head, const Activations& x, SampledRow* out) override {
    const bool masked = std::any_of(plan_.samples.begin(), plan_.samples.end(),
                                    [](const SampleSpec* spec) { return spec->mask_writer != nullptr; });
    if (!hold_masks_ || !masked) return sample(head, x, out);
    held_ = logits_of_samples(head, x, out);
  }
  bool holds_masks() const override { return true; }
  void hold_masks(bool on) override { hold_masks_ = on; }
  void release_masks(SampledRow* out) override {
    if (!held_ || held_->out != out) fail("cpu backend: release_masks for draws that are not held");
    Draws draws = std::move(*held_);
    held_.reset();
    draw(draws, true);
  }
  void finish_sample(SampledRow* out) override {
    if (!held_ || held_->out != out) return;
    Draws draws = std::move(*held_);  // never released (a step dropped): drawn with every token allowed
    held_.reset();
    draw(draws, false);
  }

  void read_rows(const Activations& x, int64_t first, int64_t count, float* out) override {
    const auto& in = cpu_of(x);
    std::memcpy(out, in.row(first), sizeof(float) * static_cast<size_t>(count * in.width()));
  }

  void write_rows(const float* in, int64_t first, int64_t count, Activations& x) override {
    auto& o = cpu_of(x);
    std::memcpy(o.row(first), in, sizeof(float) * static_cast<size_t>(count * o.width()));
  }

  void concat(const Activations& a, const Activations& b, Activations& out) override {
    const auto &left = cpu_of(a), &right = cpu_of(b);
    auto& o = cpu_of(out);
    for (int64_t r = 0; r < o.rows(); ++r) {
      std::memcpy(o.row(r), left.row(r), sizeof(float) * static_cast<size_t>(left.width()));
      std::memcpy(o.row(r) + left.width(), right.row(r), sizeof(float) * static_cast<size_t>(right.width()));
    }
  }

  void project(const Weight& w, const Activations& x, Activations& out) override {
    cpu::matmul(cpu_of(x).values.data(), x.rows(), w, cpu_of(out).values.data());
  }

 private:
  // A step's sampled rows' logits (each distinct row once) and what their draws need until they are made.
  struct Draws {
    SampledRow* out = nullptr;
    std::vector<const SampleSpec*> specs;
    std::vector<float> logits;
    std::vector<size_t> logits_of;  // per draw, its row's logits in `logits`
    size_t vocab = 0;
  };

  Draws logits_of_samples(const Weight& head, const Activations& x, SampledRow* out) const {
    Draws d{.out = out, .specs = {plan_.samples.begin(), plan_.samples.end()}};
    const auto& in = cpu_of(x);
    const std::span<const int64_t> rows = plan_.sample_rows;
    std::vector<int64_t> distinct;
    d.logits_of.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto found = std::find(distinct.begin(), distinct.end(), rows[i]);
      d.logits_of[i] = static_cast<size_t>(found - distinct.begin());
      if (found == distinct.end()) distinct.push_back(rows[i]);
    }
    std::vector<float> selected(distinct.size() * static_cast<size_t>(in.width()));
    for (size_t i = 0; i < distinct.size(); ++i)
      std::memcpy(selected.data() + i * in.width(), in.row(distinct[i]), sizeof(float) * in.width());
    d.vocab = static_cast<size_t>(head.rows);
    d.logits.resize(distinct.size() * d.vocab);
    cpu::matmul(selected.data(), static_cast<int64_t>(distinct.size()), head, d.logits.data());
    return d;
  }

  // The draws, under the masks their writers write now (`write` false: every token allowed, no writer called).
  void draw(const Draws& d, bool write) {
    const std::vector<SampleSpec> written = written_masks(d.specs, write);
    std::vector<std::exception_ptr> errors(d.specs.size());
    const size_t vocab = d.vocab;
    const auto draw_rows = [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        try {
          const SampleSpec& spec = d.specs[i]->mask_writer != nullptr ? written[i] : *d.specs[i];
          const PenaltyCounts* counts = spec.counts_slot >= 0 ? &storage_->counts(spec.counts_slot) : nullptr;
          d.out[i] =
              cpu::sample_row(std::span<const float>(d.logits.data() + d.logits_of[i] * vocab, vocab), spec, counts);
        } catch (...) {
          errors[i] = std::current_exception();  // a pool worker must not throw
        }
      }
    };
    if (d.specs.size() >= 2 && vocab >= kParallelSamplingVocab) {
      global_thread_pool().parallel_for(d.specs.size(), draw_rows);
    } else {
      draw_rows(0, d.specs.size());
    }
    for (const std::exception_ptr& error : errors)
      if (error) std::rethrow_exception(error);
    last_draws_.resize(d.specs.size());
    for (size_t i = 0; i < d.specs.size(); ++i) last_draws_[i] = d.out[i].id;
  }

  // For each spec with a MaskWriter, a copy whose `allowed` is the mask it wrote into written_[i] (other entries
  // unused). The words start all ones, so a writer that leaves some unset allows every id there: seen by the tests
  // here as on a GPU, whose memory holds another step's bits. `write` false calls no writer (every id allowed).
  std::vector<SampleSpec> written_masks(std::span<const SampleSpec* const> specs, bool write) {
    std::vector<SampleSpec> out(specs.size());
    written_.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const SampleSpec& spec = *specs[i];
      if (spec.mask_writer == nullptr) continue;
      if (!spec.allowed.empty()) fail("cpu backend: sample {} carries both a mask and a mask writer", i);
      written_[i].assign(spec.mask_writer->words(), ~0u);
      if (write) spec.mask_writer->write(written_[i]);
      out[i] = spec;
      out[i].allowed = written_[i];
      out[i].mask_writer = nullptr;
    }
    return out;
  }

  StepPlan plan_;
  std::vector<int32_t> ids_;                 // the step's ids, carried draws in place (StepPlan::carried)
  std::vector<int32_t> last_draws_;          // the ids the step's sample() drew, for the next step's carried rows
  cpu::CpuStateStorage* storage_ = nullptr;  // plan_.storage
  size_t workspace_bytes_ = 0;
  std::vector<std::vector<uint32_t>> written_;  // masks written by MaskWriters this step (written_masks)
  bool hold_masks_ = false;                     // Backend::hold_masks: the next masked draws wait (held_)
  std::optional<Draws> held_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace duet::backend
