#pragma once
// The Backend interface: the forward pass (model/qwen35_forward.cc) drives it a sublayer at a time over all rows of
// a step, so a backend can fuse inside a sublayer. A step's rows are the concatenated tokens of its pieces; each
// piece is one sequence's next positions. The backend owns what a GPU needs in its own memory: the weights (made
// resident once), every sequence's state (GDN slots and KV pages in a StateStorage), and a workspace; a step is
// described to it once, as a plan, before its sublayers run.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/penalty_counts.h"
#include "backend/sampling_knobs.h"

namespace duet::backend {

// A weight as the checkpoint stores it, in host memory (a view into the mapped file). Matrices are
// [rows = output features, cols = input features]; vectors have rows = 1.
enum class WeightType : uint8_t { bf16, f32 };
struct Weight {
  WeightType type = WeightType::bf16;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t bytes() const { return static_cast<size_t>(rows * cols) * (type == WeightType::bf16 ? 2 : 4); }
};

// A low-rank adapter (LoRA) of one projection W [out, in]: the rows of adapted pieces (StepPiece::adapted) compute
// y = x W^T + (x A^T) B^T, every other row x W^T alone. Absent (A.data == nullptr) for a projection the adapter
// leaves as it is, and for every projection when no adapter is loaded.
struct LoraFactors {
  Weight A;  // [rank, in], orthonormal rows as duet adapter writes them
  Weight B;  // [out, rank], the scale folded in
  // bf16(W + B A), [out, in]: where the backend keeps the adapter merged into a copy of its projection
  // (Backend::merge_adapter), adapted rows take this one product instead of the three; absent otherwise.
  Weight merged;
  bool present() const { return A.data != nullptr; }
};

struct GdnWeights {
  Weight in_proj_qkv;  // [2 * key_heads * key_dim + value_heads * value_dim, hidden], rows [q | k | v], head-major
  Weight in_proj_z;    // [value_heads * value_dim, hidden], the output gate
  Weight in_proj_b;    // [value_heads, hidden], beta = sigmoid(b)
  Weight in_proj_a;    // [value_heads, hidden], decay input
  Weight conv1d;       // [conv channels, kernel] depthwise causal conv (stored [C, 1, K])
  Weight A_log;        // [value_heads] (bf16 or f32, used as stored)
  Weight dt_bias;      // [value_heads]
  Weight norm;         // [value_dim] gated RMSNorm, plain weight (bf16 or f32)
  Weight out_proj;     // [hidden, value_heads * value_dim]
  struct Adapter {
    LoraFactors in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj;
  } adapter;  // of the projections above
};

struct AttentionWeights {
  Weight q_proj;  // [q_heads * 2 * head_dim, hidden]: per head [query | gate]
  Weight k_proj;  // [kv_heads * head_dim, hidden]
  Weight v_proj;  // [kv_heads * head_dim, hidden]
  Weight o_proj;  // [hidden, q_heads * head_dim]
  Weight q_norm;  // [head_dim] (1 + w)
  Weight k_norm;  // [head_dim] (1 + w)
  struct Adapter {
    LoraFactors q_proj, k_proj, v_proj, o_proj;
  } adapter;  // of the projections above
};

struct MlpWeights {
  Weight gate_proj;  // [ffn, hidden]
  Weight up_proj;    // [ffn, hidden]
  Weight down_proj;  // [hidden, ffn]
  struct Adapter {
    LoraFactors gate_proj, up_proj, down_proj;
  } adapter;  // of the projections above
};

struct GdnShape {
  int64_t hidden = 0;
  int64_t key_heads = 0;
  int64_t value_heads = 0;  // value head j reads key head j / (value_heads / key_heads)
  int64_t key_dim = 0;
  int64_t value_dim = 0;
  int64_t conv_kernel = 0;
  double norm_eps = 1e-6;
  int64_t conv_channels() const { return 2 * key_heads * key_dim + value_heads * value_dim; }
};

struct AttentionShape {
  int64_t hidden = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;  // query head j reads KV head j / (q_heads / kv_heads)
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // RoPE on dims [0, rotary_dim), half-split pairs (i, i + rotary_dim / 2)
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;
  // M-RoPE (docs/vision.md 5): which position stream (0 time, 1 height, 2 width) rotary frequency i < rotary_dim / 2
  // reads for rows with 3-D positions (StepPiece::rope_positions); from model/mrope.h. Empty: the model has none.
  std::vector<int32_t> rope_streams = {};
};

// Attention K/V lives in pages: a page holds kKvPagePositions consecutive positions of one sequence, and one page
// id names the same block in every attention layer's storage, so a sequence keeps one page table (its page ids in
// position order) for all its attention layers.
constexpr int64_t kKvPagePositions = 64;

class Backend;

// The prompt cache's second tier (issue 18): GDN snapshots and KV pages of a StateStorage kept in host memory (pinned
// on a GPU, so the copies run asynchronously) once the device tier lets them go, `snapshots` snapshots and `pages`
// pages, allocated once. Ids are the host tier's own; which are free is the engine's business (engine/prompt_cache.h).
// Copies are ordered with the steps around them like StateStorage's own: a GPU copies on its step stream, and only
// between steps, never while a step is being captured into a graph (it refuses then).
class HostStateTier {
 public:
  virtual ~HostStateTier() = default;
  virtual int64_t snapshots() const = 0;
  virtual int64_t pages() const = 0;
  virtual size_t bytes() const = 0;
  // Device snapshot `snapshot` (a StateStorage snapshot) into host snapshot `host`, and back.
  virtual void save_snapshot(int32_t snapshot, int32_t host) = 0;
  virtual void restore_snapshot(int32_t host, int32_t snapshot) = 0;
  // Device KV page pages[i] (every attention layer) into host page host[i], and back.
  virtual void save_pages(std::span<const int32_t> pages, std::span<const int32_t> host) = 0;
  virtual void restore_pages(std::span<const int32_t> host, std::span<const int32_t> pages) = 0;
};

// Per-sequence state in the backend's memory, allocated once: `slots` GDN states (the conv history and delta-rule
// state of every GDN layer), `pages` KV pages (K and V of every attention layer) and `snapshots` GDN snapshots (the
// prompt cache's copies of a slot taken at a block end). Which slots and pages are free, and who shares a page, is
// the engine's block manager's business (engine/block_manager.h); this is memory.
class StateStorage {
 public:
  explicit StateStorage(const Backend* owner) : owner_(owner) {}
  virtual ~StateStorage() = default;
  // The backend that made it: a step checks that its storage is its own before reading it as its own type.
  const Backend* owner() const { return owner_; }
  virtual int64_t slots() const = 0;
  virtual int64_t pages() const = 0;
  virtual int64_t snapshots() const = 0;
  virtual size_t bytes() const = 0;
  virtual void reset_slot(int32_t slot) = 0;  // the GDN state of an empty sequence
  // Forking a sequence (n choices sharing one prefill): slot `to`'s GDN state (conv history, delta-rule state with
  // its partial chunk) becomes a bit-for-bit copy of slot `from`'s, and page to[i] of every attention layer a copy
  // of page from[i]. Ordered with the steps around it (a GPU copies on its step stream).
  virtual void copy_slot(int32_t from, int32_t to) = 0;
  virtual void copy_pages(std::span<const int32_t> from, std::span<const int32_t> to) = 0;
  // The prompt cache: snapshot `snapshot` becomes a bit-for-bit copy of slot `slot`'s GDN state (taken at a block
  // end, where no partial chunk is pending), and back. Ordered with the steps like the copies above.
  virtual void save_snapshot(int32_t slot, int32_t snapshot) = 0;
  virtual void restore_snapshot(int32_t snapshot, int32_t slot) = 0;
  // Speculative decoding (engine/draft_verify.h): a step's rewindable piece (StepPiece::rewindable) verifies drafted
  // tokens, and the rows past the last accepted one are taken back: rewind(slot, position) leaves slot's GDN state as
  // if the step had run only its rows before `position` (start_position <= position <= start_position + rows). Only
  // right after that step, before another touches the slot. K/V past `position` need nothing: a later row writes its
  // own position before any row reads it. A backend that cannot says so here (the default), and the engine refuses
  // drafting on it by the backend's name.
  virtual bool can_rewind() const { return false; }
  virtual void rewind(int32_t slot, int64_t position);
  // Whether rewind may take back the row that completed a 64-position chunk (the step folded the chunk into the
  // boundary state). A backend that keeps no copy of the state from before a fold says no, and the engine never
  // drafts a verify piece whose row t >= 1 completes a chunk (row 0's token is always kept).
  virtual bool can_rewind_folds() const { return true; }
  // Drafting is on, with verify pieces of up to `rows` rows: a backend that needs memory to rewind takes it now (at
  // start, counted in the memory plan: Backend::gdn_rewind_bytes), and refuses pieces longer than it planned for.
  virtual void prepare_rewind(int64_t rows) { (void)rows; }
  // The prompt cache without cutting steps (StepPiece::snapshots): whether a prefill piece may ask for snapshots of its
  // GDN state at block ends inside its rows. Without it (the default) the engine ends a step at every position it
  // keeps, and each extra step reads all the weights again (issue 16: most of a 1K prompt's time to first token on a
  // GPU).
  virtual bool snapshots_inside_steps() const { return false; }
  // For tests: a snapshot's bytes as stored (conv history and delta-rule state of every GDN layer), to compare two
  // snapshots bit for bit. A backend without it refuses by name.
  virtual std::vector<std::byte> snapshot_bytes(int32_t snapshot) const;
  // The prompt cache's host tier for this storage's snapshots and pages (HostStateTier). A backend without one refuses
  // by name (the default).
  virtual std::unique_ptr<HostStateTier> new_host_tier(int64_t snapshots, int64_t pages);
  // The penalties' token counts per slot (backend/penalty_counts.h) for a vocabulary of `vocab` ids, all zero: made
  // once at start (counted in the memory plan: Backend::penalty_counts_bytes). A storage without them refuses by name
  // (the default), and so does update_counts before this.
  virtual void prepare_counts(int32_t vocab);
  // Applies a batch of updates, checked first (check_counts_updates: a bad one refuses the whole batch), its clears
  // first (for_counts_updates). Ordered with the steps around it like copy_slot: a GPU updates on its step stream, only
  // between steps (it refuses while a step is being captured into a graph). A step's SampleSpec::counts_slot reads the
  // counts as the updates before the step left them.
  virtual void update_counts(std::span<const CountsUpdate> updates);

 private:
  const Backend* owner_;
};

// A snapshot taken inside a step: when the piece's rows have reached `position` (a multiple of 64 inside them:
// start_position < position <= start_position + rows), the GDN state of its slot is written into snapshot `snapshot`,
// the same bytes save_snapshot would copy had the step ended there. Only where StateStorage::snapshots_inside_steps().
struct StepSnapshot {
  int64_t position = 0;
  int32_t snapshot = 0;
};

// What a piece's rows are for. It may choose kernels (decode rows: a skinny batch-invariant GEMM), never a row's
// dependence on other rows. A token computed as a prefill row may differ in its last bits from the same token
// computed as a decode row; nothing may depend on them being equal.
enum class RowRole : uint8_t { prefill, decode };

// The rows [first_row, first_row + rows) of a step are positions [start_position, start_position + rows) of the
// sequence whose GDN state is `slot` of the step's storage and whose KV pages are `page_table` (position order,
// covering every position up to start_position + rows).
struct StepPiece {
  int64_t first_row = 0;
  int64_t rows = 0;
  int64_t start_position = 0;
  RowRole role = RowRole::prefill;
  // The rows go through the weights' adapters (LoraFactors): a decision served through a runtime adapter. Only for a
  // backend that applies_adapters(); rows of other pieces never pass through an adapter's products.
  bool adapted = false;
  // Verify rows (at most 64): the backend keeps what StateStorage::rewind needs to take some of them back. They are
  // computed exactly as the same positions' decode rows would be, one piece or many.
  bool rewindable = false;
  int32_t slot = 0;
  std::span<const int32_t> page_table;
  // Rotary positions (docs/vision.md 5). Empty rope_positions: row t rotates at start_position + t + rope_delta (a
  // text row; rope_delta is nonzero after a prompt with images). Else [rows, 3]: row t's (time, height, width)
  // positions, each frequency reading its stream (AttentionShape::rope_streams). Either way K/V go to, and attention
  // spans, the row's own position. Only for a backend that applies_mrope().
  std::span<const int32_t> rope_positions = {};
  int64_t rope_delta = 0;
  // Prefill pieces only: GDN snapshots to take at block ends inside the rows, in position order (StepSnapshot).
  std::span<const StepSnapshot> snapshots = {};
};

// A structured output's token mask (grammar/token_mask.h), written when the backend asks for it instead of before the
// step (issue 19, masks beside the forward): Backend::sample calls write() once for each spec that carries one, in the
// order of StepPlan::samples, on the thread that runs the step, after the step's forward and logits are on their way
// (a GPU's kernels enqueued, so the host makes the masks while the device computes) and before any row is drawn.
// `words` (words() of them) is where the sampler reads the mask from, pinned upload memory on a GPU: write() sets every
// word (the memory holds an earlier step's bits). What it throws fails the step.
class MaskWriter {
 public:
  virtual ~MaskWriter() = default;
  virtual size_t words() const = 0;
  virtual void write(std::span<uint32_t> words) = 0;
};

// OpenAI's logit_bias entry: added to the id's logit after the penalties.
using LogitBias = std::pair<int32_t, float>;

// A row sampled where its logits are (Backend::sample): the request's sampling settings and where the counts its
// penalties read are, with the semantics of the CPU backend's sampler (cpu/sampler.h; the same token for the same
// logits), the draw keyed by (seed, position).
struct SampleSpec : SamplingKnobs {
  int32_t top_logprobs = -1;  // -1: none; 0: the sampled token's; n: also the n most likely
  uint64_t seed = 0;
  int64_t position = 0;
  // The slot of the step's storage whose penalty counts (StateStorage::update_counts) the penalties read; -1: none (no
  // penalty is on, or nothing was seen).
  int32_t counts_slot = -1;
  // Ids generated before this row that the slot's counts do not hold yet, each one more generated: a verify row's
  // earlier drafts in the same step (engine/draft_verify.h). Valid until the step ends.
  std::span<const int32_t> extra_generated;
  // logit_bias, each id once, added after the penalties. Valid until the step ends.
  std::span<const LogitBias> logit_bias;
  // A structured output's token mask (grammar/token_mask.h): bit (id % 32) of word (id / 32) set where the id may be
  // drawn; every other logit is -inf after the penalties (cpu/sampler.h step 2c). Empty: no mask. Valid until the
  // step ends.
  std::span<const uint32_t> allowed;
  // The same mask written when the backend asks for it (MaskWriter): what the engine uses, so that its masks are made
  // while the forward runs. At most one of `allowed` and `mask_writer` per spec; null: none.
  MaskWriter* mask_writer = nullptr;
  bool masked() const { return !allowed.empty() || mask_writer != nullptr; }
  size_t mask_words() const { return mask_writer != nullptr ? mask_writer->words() : allowed.size(); }
};

struct SampledRow {
  int32_t id = 0;
  float logprob = 0;                           // raw log_softmax of the id, when top_logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // the top_logprobs most likely (id, raw logprob)
};

// A row whose id is a draw of the step before, read where that step drew it (issue 16 item 5: the host plans and
// enqueues step N + 1 before step N's draws are back, Backend::sample_ahead). StepPlan::ids[row] holds a placeholder;
// the row embeds the id that draw `sample` (an index into the step before's sample_rows) picked.
struct CarriedId {
  int64_t row = 0;
  int64_t sample = 0;
  // >= 0: the id is also one more generated in this slot's penalty counts (penalty_counts.h), on the device, before
  // the step's samplers read them: a penalized sequence's last token, which the host has not read and so cannot send
  // (StateStorage::update_counts). -1: the counts are left alone.
  int32_t counts_slot = -1;
};

// One step, handed to the backend once (begin_step) before its sublayers run; the spans must stay valid until the
// step ends. Pieces are in row order.
struct StepPlan {
  StateStorage* storage = nullptr;  // every piece's slot and pages; made by this backend (new_state_storage)
  std::span<const int32_t> ids;     // [rows] token ids
  std::span<const StepPiece> pieces;
  std::span<const int64_t> logit_rows;  // the rows lm_head computes logits for, ascending
  // The rows sample() picks a token for (in row order; a row repeats once for every further draw from it, each
  // by its own settings: forked choices), and how.
  std::span<const int64_t> sample_rows;
  std::span<const SampleSpec* const> samples;
  // The step writes host rows into its activations (Backend::write_rows: the MTP layer's input rows), so a backend
  // that records steps to replay them (CUDA graphs) runs this one as it comes.
  bool host_rows = false;
  // Rows whose ids are the step before's draws (CarriedId), in row order; only right after a step whose last work was
  // its draws (sample or sample_ahead), and whose draws they name.
  std::span<const CarriedId> carried = {};
};

// [rows, width] activations in the backend's memory and element type.
class Activations {
 public:
  Activations(int64_t rows, int64_t width) : rows_(rows), width_(width) {}
  virtual ~Activations() = default;
  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }

 private:
  int64_t rows_;
  int64_t width_;
};

// Takes a piece's final-norm rows where the backend computed them (model::Piece::rows_to), instead of a copy on the
// host: a decision head that runs on the same device reads them there (src/decision/cuda). Called on the engine
// thread during the step, after the final norm and before the step's later work reuses the rows' memory; whatever it
// launches must be ordered before that (the CUDA backend's step stream). `first_row` indexes x, not positions.
class RowConsumer {
 public:
  virtual ~RowConsumer() = default;
  virtual void take_rows(Backend& backend, const Activations& x, int64_t first_row, int64_t count) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // How the forward pass uses a weight, so a backend can prepare for it at load instead of in the first step (a GPU
  // pins its GEMM algorithm for every projection and for the logits head, and checks it there).
  // lora_a / lora_b: an adapter's factors (LoraFactors), read by the products x A^T and (x A^T) B^T.
  enum class WeightUse : uint8_t { other, projection, logits, lora_a, lora_b };
  // The copy of `w` the backend's kernels read, made once at load and kept as long as the backend: the CPU reads
  // the mapped checkpoint as is; a GPU copies it to device memory in the dtype the checkpoint stores.
  virtual Weight resident(const Weight& w, WeightUse use) = 0;
  // Projections that read the same input, made resident together: a GPU stores them back to back in one allocation
  // (so its decode GEMM reads them in one launch: kernels.h, SkinnyOutputs); each weight keeps its own view and its
  // bits. By default each is made resident on its own.
  virtual void resident_together(std::span<Weight* const> weights, WeightUse use) {
    for (Weight* w : weights) *w = resident(*w, use);
  }

  // For a GPU: the device memory free now plus what the backend already holds (resident weights, workspace);
  // 0 for the CPU (the host's RAM is the limit).
  virtual size_t device_memory_bytes() const = 0;

  virtual std::unique_ptr<StateStorage> new_state_storage(const GdnShape& gdn, int64_t gdn_layers, int64_t slots,
                                                          const AttentionShape& attention, int64_t attention_layers,
                                                          int64_t pages, int64_t snapshots) = 0;
  virtual size_t gdn_state_bytes(const GdnShape& shape) const = 0;  // one slot of one GDN layer
  // What StateStorage::prepare_rewind(rows) takes per slot of one GDN layer (0: nothing beyond the state).
  virtual size_t gdn_rewind_bytes(const GdnShape& shape, int64_t rows) const {
    (void)shape, (void)rows;
    return 0;
  }
  virtual size_t kv_page_bytes(const AttentionShape& shape) const = 0;  // one page of one attention layer (K and V)
  // What StateStorage::prepare_counts(vocab) takes per slot (0: host counts that grow with the ids seen, a few bytes
  // an id).
  virtual size_t penalty_counts_bytes(int32_t vocab) const {
    (void)vocab;
    return 0;
  }

  // Room for the activations of steps whose scratch needs up to `bytes` (the model sizes it from its widths and
  // the most rows a step will have): reserved before serving, so steps allocate nothing.
  virtual void reserve_workspace(size_t bytes) = 0;
  virtual size_t workspace_bytes() const = 0;

  // Starts a step: the backend takes the plan (one copy to the device for a GPU) and recycles the previous step's
  // activations. Every call below, until the next begin_step, belongs to this step.
  virtual void begin_step(const StepPlan& plan) = 0;
  // Activations of this step (valid until the next begin_step).
  virtual std::unique_ptr<Activations> new_activations(int64_t rows, int64_t width) = 0;

  // out[r] = table[ids[r]] for the step's ids
  virtual void embed(const Weight& table, Activations& out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * (1 + w), per row
  virtual void rms_norm(const Activations& x, const Weight& w, double eps, Activations& out) = 0;
  // x += y
  virtual void add(Activations& x, const Activations& y) = 0;
  // x += y, then out = rms_norm(x): the residual add and the next norm, which a GPU does in one pass over x with
  // the bits of the two calls.
  virtual void add_rms_norm(Activations& x, const Activations& y, const Weight& w, double eps, Activations& out) {
    add(x, y);
    rms_norm(x, w, eps, out);
  }
  // out = GDN(x) over the step's pieces, advancing GDN layer `gdn_layer` of each piece's state
  virtual void gdn_mixer(const GdnWeights& w, const GdnShape& shape, int64_t gdn_layer, const Activations& x,
                         Activations& out) = 0;
  // out = gated causal attention(x) over the step's pieces, writing each row's K/V into attention layer
  // `attention_layer` of its sequence's pages and reading positions through the page table in position order, so
  // results do not depend on which pages a sequence got
  virtual void attention_mixer(const AttentionWeights& w, const AttentionShape& shape, int64_t attention_layer,
                               const Activations& x, Activations& out) = 0;
  // out = down(silu(gate(x)) * up(x))
  virtual void mlp(const MlpWeights& w, const Activations& x, Activations& out) = 0;
  // logits[i, :] = head · x[plan.logit_rows[i]], written to host memory [logit_rows.size(), head.rows]
  virtual void lm_head(const Weight& head, const Activations& x, float* logits) = 0;
  // Whether the sublayers apply the weights' LoraFactors to the rows of adapted pieces. A backend that does not is
  // never given an adapter: loading one refuses by the backend's name.
  virtual bool applies_adapters() const { return false; }
  // Called once per adapted projection after the weights are resident: a backend may keep bf16(W + B A) beside W
  // (into lora.merged) so that adapted rows take one GEMM; it returns the device bytes that copy holds (0: it keeps
  // the low-rank products). Never changes what rows without the adapter compute.
  virtual size_t merge_adapter(const Weight& w, LoraFactors& lora) {
    (void)w;
    (void)lora;
    return 0;
  }
  // Whether attention_mixer reads StepPiece::rope_positions and rope_delta (images' 3-D positions). A backend that
  // does not is never given a piece with them: the model refuses it by the backend's name.
  virtual bool applies_mrope() const { return false; }
  // out[i]: the token picked for plan.sample_rows[i] from head · x[row], by plan.samples[i], as the CPU backend's
  // sampler picks it (cpu/sampler.h). The logits stay where they were computed: every token a step draws is drawn here.
  // The specs' mask writers are called in here, as MaskWriter says: a spec's mask is the same bits whichever way it
  // comes, so the tokens are too.
  virtual void sample(const Weight& head, const Activations& x, SampledRow* out) = 0;
  // sample() in two halves, so that the host can plan and begin the next step while the device draws (issue 16 item
  // 5): sample_ahead enqueues the draws and may return before they are made; finish_sample(out) waits for the draws
  // that sample_ahead was to write into `out` (valid until then) and writes them. Between the two, the next step may
  // begin and run, its rows reading these draws (StepPlan::carried). Every sample_ahead is finished, in any order. A
  // backend that draws on the host does it all in sample_ahead (the default).
  virtual void sample_ahead(const Weight& head, const Activations& x, SampledRow* out) { sample(head, x, out); }
  virtual void finish_sample(SampledRow* out) { (void)out; }
  // Whether sample_ahead returns before the draws are made, so that a step begun ahead overlaps them.
  virtual bool draws_ahead() const { return false; }
  // Masks held (Model::launch_holding_masks, issue 16 item 5): while hold_masks(true), a sample_ahead with masked rows
  // enqueues the step up to its logits and neither calls the rows' MaskWriters nor draws; release_masks(out) (out as
  // given to that sample_ahead) calls the writers and enqueues the draws. It comes before the next step begins;
  // finish_sample on draws still held enqueues them first with every token allowed, calling no writer.
  virtual bool holds_masks() const { return false; }
  virtual void hold_masks(bool on) { (void)on; }
  virtual void release_masks(SampledRow* out) { (void)out; }
  // Copies rows [first, first + count) to host memory as fp32.
  virtual void read_rows(const Activations& x, int64_t first, int64_t count, float* out) = 0;

  // What the MTP layer's steps need beyond the main model's (model/mtp_forward.cc): host rows in, two activations
  // side by side, and a projection on its own. A backend that lacks them refuses by its name (backend_defaults.cc).
  // Rows [first, first + count) of x = host fp32 rows [count, x.width()] (rounded to the backend's element type).
  virtual void write_rows(const float* in, int64_t first, int64_t count, Activations& x);
  // out = [a | b] per row; out.width() = a.width() + b.width().
  virtual void concat(const Activations& a, const Activations& b, Activations& out);
  // out = x w^T, each row's outputs as the sublayers' projections compute them (row-invariant), no adapter.
  virtual void project(const Weight& w, const Activations& x, Activations& out);

  // Off the step path, from any thread: y = x w^T in fp32 for host rows x [m, w.cols] into host y [m, w.rows], each
  // output a fixed-order sum over its own row (any m gives a row the same bits). For the products of a decision
  // head, whose weights live on the host. Whether the backend offers it; products() is only called when it does.
  virtual bool has_host_products() const { return false; }
  virtual void host_products(const float* x, int64_t m, const Weight& w, float* y) {
    (void)x, (void)m, (void)w, (void)y;
  }

  // The measurements a run prints at its end (the CUDA backend's DUET_PROFILE tables) start over from here: `duet run`
  // calls it after its warm-up passes, whose one-time costs (inside the timed spans of each kernel's first launches:
  // most likely the modules CUDA loads lazily) would otherwise sit in the tables, half of a one-prompt prefill table.
  virtual void restart_measurements() {}
};

// The reference backend: fp32 arithmetic on the CPU, multithreaded over the global thread pool.
std::unique_ptr<Backend> make_cpu_backend();
// The CUDA backend (sm_90a) on device `device`; throws duet::Error when this build has none or no GPU answers.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
// True when this build has the CUDA backend and device 0 is a GPU it runs on (sm_90: H100/H200).
bool cuda_backend_available();

}  // namespace duet::backend
