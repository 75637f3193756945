#pragma once
// The model as the engine sees it: load a checkpoint, make per-sequence state, run a step of pieces.
// The forward pass itself (qwen35_forward.cc) is written once against backend/backend.h.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"
#include "model/qwen35_config.h"

namespace duet::model {

// What a piece wants back. Rows are in the piece's token order.
enum class RowOutput : uint8_t {
  none = 0,
  last_logits = 1,  // logits of the piece's last row (tests and tools; the engine samples with `sampled`)
  all_logits = 2,   // logits of every row (tests, prompt logprobs)
  norm_rows = 4,    // final-norm rows of every row (the decision head reads these)
  sampled = 8,      // the piece's last row sampled by the backend (Backend::sample; Piece::sample)
};
constexpr RowOutput operator|(RowOutput a, RowOutput b) {
  return static_cast<RowOutput>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}
constexpr bool has(RowOutput set, RowOutput flag) {
  return (static_cast<uint8_t>(set) & static_cast<uint8_t>(flag)) != 0;
}

// One sequence and a contiguous run of its next positions: a prefill chunk or one decode token. The sequence is
// plain data owned by the caller's block manager (engine/block_manager.h): its GDN slot in the step's storage, its
// KV pages and how many positions it has consumed. forward() writes the slot and the pages from `position` on and
// moves nothing else: the caller advances its position after the step.
struct Piece {
  int32_t slot = 0;
  std::span<const int32_t> page_table = {};  // page ids in position order, covering position + tokens.size()
  int32_t position = 0;                      // the first token's position
  std::span<const int32_t> tokens = {};      // ids in [0, vocab_size)
  RowOutput wants = RowOutput::last_logits;
  // decode: one generated token (a GPU computes its rows with decode kernels); prefill: prompt rows, whose bytes
  // do not depend on where the prompt was cut at multiples of 64.
  backend::RowRole role = backend::RowRole::prefill;
  const backend::SampleSpec* sample = nullptr;  // with RowOutput::sampled
  // With RowOutput::sampled: more draws from the same last row, each by its own settings (the first tokens of the
  // choices forked from this sequence, engine/block_manager.h); results in PieceResult::fork_sampled, in order.
  std::span<const backend::SampleSpec* const> fork_samples = {};
  // A verify piece (speculative decoding, engine/draft_verify.h): the last generated token and the drafted tokens
  // after it, as decode rows. With RowOutput::sampled, row t < rows - 1 is drawn too, by row_samples[t] (one spec per
  // row but the last, which `sample` draws): results in PieceResult::row_sampled. The backend keeps what it needs to
  // take rows back (backend::StateStorage::rewind).
  std::span<const backend::SampleSpec* const> row_samples = {};
  bool rewindable = false;
  // Through the runtime adapter (Model::has_adapter()): a decision of the adapted model. Other pieces' rows never
  // pass through the adapter, so a chat reply is the same with or without one loaded.
  bool adapted = false;
  // With RowOutput::norm_rows: where the rows go instead of PieceResult::norm_rows (left empty), read where they
  // were computed (a decision head on the GPU); null: copied to the host.
  backend::RowConsumer* rows_to = nullptr;
  // A prompt with images (docs/vision.md 4-5; only on a backend that applies_mrope()). image_rows: the rows that
  // replace the embeddings of this piece's image tokens (config().image_token_id), in token order
  // ([image tokens in this piece, hidden] fp32, the vision tower's rows): transformers' masked_scatter.
  std::span<const float> image_rows = {};
  // Rotary positions: empty, token t rotates at position + t + rope_delta in all three streams (text; rope_delta is
  // the prompt's delta, model/mrope.h, for every piece after a prompt with images); else [tokens, 3], token t's
  // (time, height, width) as model/mrope.h gives them (every chunk of such a prompt: its text between two images is
  // not at index + the final delta). K/V and the causal span follow `position` either way.
  std::span<const int32_t> rope_positions = {};
  int32_t rope_delta = 0;
  // A prefill piece's GDN snapshots inside its rows (backend::StepSnapshot; the prompt cache, issue 18): only on a
  // storage that snapshots_inside_steps(), at multiples of 64 in (position, position + tokens], ascending.
  std::span<const backend::StepSnapshot> snapshots = {};
  // A decode piece of one token that is the draw of piece `carried_from` of the step launched just before this one
  // (Model::launch), not read back yet: `tokens` holds a placeholder, and the row reads the id where it was drawn.
  // When `sample` reads penalty counts (SampleSpec::counts_slot), that id is added to them on the device first: the
  // caller has not sent it, and must not (backend::CarriedId::counts_slot). -1: the tokens are the ids.
  int32_t carried_from = -1;
};

// A step refused before any state moved, because of one piece (its index in the step): the engine fails that
// piece's request alone and runs the others again.
class PieceRefused : public Error {
 public:
  PieceRefused(size_t piece, const std::string& message) : Error(message), piece_(piece) {}
  size_t piece() const { return piece_; }

 private:
  size_t piece_;
};

struct PieceResult {
  std::vector<float> logits;     // [rows, vocab]: 1 row for last_logits, tokens.size() for all_logits
  std::vector<float> norm_rows;  // [tokens.size(), hidden] when norm_rows was asked
  backend::SampledRow sampled;   // when sampled was asked
  // One per Piece::fork_samples, in order.
  std::vector<backend::SampledRow> fork_sampled;
  // One per Piece::row_samples: the draws of the piece's rows before its last.
  std::vector<backend::SampledRow> row_sampled;
};

// A run of MTP rows of one sequence (the checkpoint's multi-token-prediction layer, model/mtp_weights.h; the math
// in tools/qwen35_mtp_spec.md). Row t is MTP position j = position + t: it reads hidden row t, the main model's
// final-norm row at j (or, drafting, the previous draft step's norm_rows row), and token t, the token at position
// j + 1 (drafting: the token just drafted), and its logits predict the token at j + 2. The row's K/V go to the MTP
// layer's own pages (Model::new_mtp_storage) at position j; it attends to positions 0..j through page_table, so
// every earlier MTP position of the sequence must have been run: the whole prompt at prefill, each accepted
// position after a verify step.
struct MtpPiece {
  std::span<const int32_t> page_table = {};  // page ids in position order, covering position + tokens.size()
  int32_t position = 0;                      // j of the first row
  std::span<const float> hidden = {};        // [tokens.size(), hidden_size] fp32
  std::span<const int32_t> tokens = {};      // ids in [0, vocab_size)
  RowOutput wants = RowOutput::last_logits;  // last_logits or all_logits, norm_rows, sampled; nothing else
  backend::RowRole role = backend::RowRole::prefill;
};

struct MtpResult {
  std::vector<float> logits;  // [rows, vocab]: 1 row for last_logits, tokens.size() for all_logits
  // With norm_rows, [tokens.size(), hidden] each. norm_rows: after mtp.norm, what lm_head reads and what the next
  // draft step takes as its hidden row (vLLM's Qwen3-Next/Qwen3.5 proposer feeds this one back).
  // pre_norm_rows: the decoder layer's output before mtp.norm (DeepSeek-V3's MTP feeds that one back instead).
  std::vector<float> norm_rows;
  std::vector<float> pre_norm_rows;
  // With RowOutput::sampled: the last row's most likely next token, the backend's greedy draw on its own logits (a GPU
  // keeps them on the device); -1 without.
  int32_t sampled = -1;
};

class Model {
 public:
  // Loads config.json and the safetensors of `model_dir`, checking every tensor before building anything, onto the
  // backend named: cpu, cuda, or auto (cuda when this build has it and a GPU is present, else cpu).
  // With `adapter_dir`, also a runtime adapter folder (model/runtime_adapter.h), checked in full against the base
  // before any weight reaches the backend; refused when the backend does not apply adapters.
  static std::unique_ptr<Model> load(const std::string& model_dir, std::string_view backend = "cpu",
                                     const std::string& adapter_dir = {});
  virtual ~Model() = default;

  virtual const Qwen35Config& config() const = 0;
  virtual size_t weight_bytes() const = 0;
  // Whether pieces may carry image rows and 3-D positions (Piece::image_rows, rope_positions): a model with an image
  // token on a backend that applies M-RoPE (the CPU backend; others refuse such pieces by name).
  virtual bool reads_images() const { return false; }
  // The runtime adapter, when one was loaded: pieces may then ask for it (Piece::adapted).
  virtual bool has_adapter() const { return false; }
  virtual size_t adapter_bytes() const { return 0; }  // its factors, as stored

  // KV memory comes in pages of kv_page_positions() consecutive positions of one sequence, across all attention
  // layers. The engine plans: weights + parallel * sequence_fixed_bytes() + pages * kv_page_bytes()
  // + workspace_bytes(the most rows of a step).
  virtual int32_t kv_page_positions() const = 0;
  virtual size_t kv_page_bytes() const = 0;         // one page, K and V of every attention layer
  virtual size_t sequence_fixed_bytes() const = 0;  // one sequence's GDN state (conv history, delta rule)
  // What the backend keeps per sequence to take back verify pieces of up to `rows` rows (StateStorage::prepare_rewind).
  virtual size_t sequence_rewind_bytes(int64_t rows) const {
    (void)rows;
    return 0;
  }
  // What the backend keeps per sequence for the penalties' token counts (StateStorage::prepare_counts, which the engine
  // calls at start).
  virtual size_t sequence_counts_bytes() const { return 0; }
  // Bytes of one sequence's fixed state plus the K/V of max_positions positions.
  virtual size_t sequence_state_bytes(int32_t max_positions) const = 0;

  // The backend's host products (Backend::host_products), for a decision head's products; null when it has none.
  virtual backend::Backend* products_backend() const { return nullptr; }
  // The backend's measurements start over (Backend::restart_measurements): after a run's warm-up passes.
  virtual void restart_measurements() {}

  // The memory a GPU backend draws from: its free memory plus what the model already holds there (the weights);
  // 0 on the CPU, whose limit is the host's RAM.
  virtual size_t device_memory_bytes() const { return 0; }

  // Scratch memory of a step of `rows` rows (activations, logits), in the backend's memory.
  virtual size_t workspace_bytes(int64_t rows) const = 0;
  // Reserves that scratch for steps of up to `rows` rows before serving, so steps allocate nothing. A larger step
  // still runs (the workspace grows first), but the engine never sends one.
  virtual void reserve_workspace(int64_t rows) = 0;

  // The memory of every sequence's state in the backend: `slots` GDN slots, `kv_pages` KV pages and `snapshots` GDN
  // snapshots (the prompt cache's). Its bookkeeping (who holds which slot and page) is the caller's.
  virtual std::unique_ptr<backend::StateStorage> new_state_storage(int32_t slots, int64_t kv_pages,
                                                                   int64_t snapshots = 0) = 0;

  // Rows of the LM head (lm_head.weight [V, h], or the embedding when tied) for `ids`, as fp32 in host memory
  // [ids.size(), h]: what the decision head's lexical term reads. A gather by id, never a product with the head.
  // Thread-safe. Refuses (duet::Error) an id outside the vocabulary, or a model that cannot.
  virtual void lm_head_rows(std::span<const int32_t> ids, float* out) const;

  // Runs one step over `storage` (made by new_state_storage). Each piece's rows depend only on its own sequence (row
  // invariance): results do not change with which other pieces share the step, nor with which KV pages they got.
  // Throws PieceRefused, with nothing written, for a piece it cannot run (an id outside the vocabulary, a slot or a
  // page outside the storage, a page table too short for its positions, a slot twice in one step). Any other
  // exception may leave the slots and pages of the step's pieces half-written.
  // Pieces of either role may come in any order.
  virtual std::vector<PieceResult> forward(backend::StateStorage& storage, std::span<const Piece> pieces) = 0;

  // forward() in two halves (issue 16 item 5, the host never stalls the GPU): launch() runs the step up to its draws
  // and returns before they are back; collect() waits for them and gives the results. Launched steps are collected
  // in launch order. The engine launches step N + 1 before it collects step N, so the device runs N + 1 while the host
  // reads N's tokens; N + 1's pieces then carry N's draws (Piece::carried_from) instead of their ids. launch() refuses
  // like forward(); a carried piece must name a sampled piece of the step launched just before, with no other work
  // between. The default runs forward() in launch() and refuses carried pieces.
  struct Launched {
    virtual ~Launched() = default;
    std::vector<PieceResult> results;
  };
  virtual std::unique_ptr<Launched> launch(backend::StateStorage& storage, std::span<const Piece> pieces);
  virtual std::vector<PieceResult> collect(std::unique_ptr<Launched> step);
  // Whether a launched step's draws are made while the host goes on (a GPU): only then does launching ahead pay.
  virtual bool overlaps_steps() const { return false; }
  // Structured-output rows in a step launched ahead (issue 16 item 5): where masks_later(), launch_holding_masks()
  // launches a step whose masked draws wait (on the device) for release_masks(step): their SampleSpec::mask_writer are
  // called there, once the step before has been collected and its tokens taken into the grammars, not in the launch.
  // A step so launched is released before the next launch; collecting or dropping it unreleased draws with every
  // token allowed and calls no writer (its draws are then not to be used). The default holds nothing: refused.
  virtual bool masks_later() const { return false; }
  virtual std::unique_ptr<Launched> launch_holding_masks(backend::StateStorage& storage, std::span<const Piece> pieces);
  virtual void release_masks(Launched& step);

  // The MTP layer, when the checkpoint has one that loaded (model/mtp_weights.h); the rest refuse without it.
  virtual bool has_mtp() const { return false; }
  // The MTP layer's K/V: `kv_pages` pages of kv_page_positions() positions, a storage of its own. A page id names
  // a block of the main storage and of this one alike, so a sequence may use one page table for both.
  virtual std::unique_ptr<backend::StateStorage> new_mtp_storage(int64_t kv_pages) {
    (void)kv_pages;
    fail("this model has no MTP layer");
  }
  virtual size_t mtp_kv_page_bytes() const { return 0; }
  // Runs the MTP rows of `pieces` over `storage` (made by new_mtp_storage), one piece per sequence; refuses
  // (PieceRefused, nothing written) like forward() does, and a hidden span of the wrong size.
  virtual std::vector<MtpResult> mtp_forward(backend::StateStorage& storage, std::span<const MtpPiece> pieces) {
    (void)storage, (void)pieces;
    fail("this model has no MTP layer");
  }
};

}  // namespace duet::model
