#pragma once
// The model as the engine sees it: load a checkpoint, make per-sequence state, run a step of pieces.
// The forward pass itself (qwen35_forward.cc) is written once against backend/backend.h.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/qwen35_config.h"

namespace duet::model {

// Everything one sequence carries between steps: per GDN layer the conv history and the fp32 delta-rule
// state, per attention layer the K/V cache, and how many positions have been consumed. Owned by the engine's
// StatePool; created by Model::new_sequence_state.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int32_t position() const = 0;       // tokens consumed so far
  virtual int32_t max_positions() const = 0;  // capacity of the KV cache
  virtual void reset() = 0;                   // back to an empty sequence, keeping the memory
};

// What a piece wants back. Rows are in the piece's token order.
enum class RowOutput : uint8_t {
  none = 0,
  last_logits = 1,  // logits of the piece's last row (a generate piece whose last row samples)
  all_logits = 2,   // logits of every row (tests, prompt logprobs)
  norm_rows = 4,    // final-norm rows of every row (the decision head reads these)
};
constexpr RowOutput operator|(RowOutput a, RowOutput b) {
  return static_cast<RowOutput>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}
constexpr bool has(RowOutput set, RowOutput flag) {
  return (static_cast<uint8_t>(set) & static_cast<uint8_t>(flag)) != 0;
}

// One sequence and a contiguous run of its next positions: a prefill chunk or one decode token.
struct Piece {
  SequenceState* state = nullptr;   // advanced by tokens.size() positions
  std::span<const int32_t> tokens;  // ids in [0, vocab_size)
  RowOutput wants = RowOutput::last_logits;
};

struct PieceResult {
  std::vector<float> logits;     // [rows, vocab]: 1 row for last_logits, tokens.size() for all_logits
  std::vector<float> norm_rows;  // [tokens.size(), hidden] when norm_rows was asked
};

class Model {
 public:
  // Loads config.json and the safetensors of `model_dir`, checking every tensor before building anything.
  static std::unique_ptr<Model> load(const std::string& model_dir);
  virtual ~Model() = default;

  virtual const Qwen35Config& config() const = 0;
  virtual size_t weight_bytes() const = 0;
  // Bytes one sequence's state takes with room for max_positions tokens (for the engine's memory plan).
  virtual size_t sequence_state_bytes(int32_t max_positions) const = 0;
  virtual std::unique_ptr<SequenceState> new_sequence_state(int32_t max_positions) const = 0;

  // Runs one step. Each piece's rows depend only on its own sequence (row invariance): results do not change
  // with which other pieces share the step. Throws duet::Error if a piece would overflow its state.
  virtual std::vector<PieceResult> forward(std::span<const Piece> pieces) = 0;
};

}  // namespace duet::model
