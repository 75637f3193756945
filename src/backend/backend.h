#pragma once
// The Backend interface: the forward pass (model/qwen35_forward.cc) drives it a sublayer at a time over all rows of
// a step, so a backend can fuse inside a sublayer. A step's rows are the concatenated tokens of its pieces; each
// piece is one sequence's next positions and carries that sequence's per-layer state.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

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
};

struct AttentionWeights {
  Weight q_proj;  // [q_heads * 2 * head_dim, hidden]: per head [query | gate]
  Weight k_proj;  // [kv_heads * head_dim, hidden]
  Weight v_proj;  // [kv_heads * head_dim, hidden]
  Weight o_proj;  // [hidden, q_heads * head_dim]
  Weight q_norm;  // [head_dim] (1 + w)
  Weight k_norm;  // [head_dim] (1 + w)
};

struct MlpWeights {
  Weight gate_proj;  // [ffn, hidden]
  Weight up_proj;    // [ffn, hidden]
  Weight down_proj;  // [hidden, ffn]
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
};

// The rows [first_row, first_row + rows) of a step are positions [start_position, start_position + rows) of one
// sequence.
struct PieceRows {
  int64_t first_row = 0;
  int64_t rows = 0;
  int64_t start_position = 0;
};

// One sequence's state for one layer, kept by the backend between steps: GDN conv history and delta-rule state, or
// a view of its K/V pages.
class LayerState {
 public:
  virtual ~LayerState() = default;
  virtual void reset() = 0;  // an empty sequence
};

// Attention K/V lives in pages: a page holds kKvPagePositions consecutive positions of one sequence, and one page
// id names the same block in every attention layer's storage, so a sequence keeps one page table (its page ids in
// position order) for all its attention layers. Which pages are free is the model's business; this is storage.
constexpr int64_t kKvPagePositions = 64;

class KvPages {
 public:
  virtual ~KvPages() = default;
  virtual int64_t count() const = 0;  // pages
  virtual size_t bytes() const = 0;
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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  virtual std::unique_ptr<Activations> new_activations(int64_t rows, int64_t width) = 0;
  virtual std::unique_ptr<LayerState> new_gdn_state(const GdnShape& shape) = 0;
  virtual size_t gdn_state_bytes(const GdnShape& shape) const = 0;
  // Storage for `pages` pages of `layers` attention layers, allocated once.
  virtual std::unique_ptr<KvPages> new_kv_pages(const AttentionShape& shape, int64_t layers, int64_t pages) = 0;
  virtual size_t kv_page_bytes(const AttentionShape& shape) const = 0;  // one page of one attention layer (K and V)
  // Attention layer `layer`'s view of one sequence's K/V in `pages`, read and written through `page_table`, which
  // the sequence owns and must keep covering every position attention_mixer is asked to write.
  virtual std::unique_ptr<LayerState> new_kv_cache(KvPages& pages, int64_t layer,
                                                   const std::vector<int32_t>& page_table) = 0;

  // out[r] = table[ids[r]]
  virtual void embed(const Weight& table, std::span<const int32_t> ids, Activations& out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * (1 + w), per row
  virtual void rms_norm(const Activations& x, const Weight& w, double eps, Activations& out) = 0;
  // x += y
  virtual void add(Activations& x, const Activations& y) = 0;
  // out = GDN(x) for each piece's rows, advancing states[i] (the state of pieces[i])
  virtual void gdn_mixer(const GdnWeights& w, const GdnShape& shape, const Activations& x,
                         std::span<const PieceRows> pieces, std::span<LayerState* const> states, Activations& out) = 0;
  // out = gated causal attention(x) for each piece's rows, appending to states[i] (the KV cache of pieces[i]); reads
  // positions through the page table in position order, so results do not depend on which pages a sequence got
  virtual void attention_mixer(const AttentionWeights& w, const AttentionShape& shape, const Activations& x,
                               std::span<const PieceRows> pieces, std::span<LayerState* const> states,
                               Activations& out) = 0;
  // out = down(silu(gate(x)) * up(x))
  virtual void mlp(const MlpWeights& w, const Activations& x, Activations& out) = 0;
  // logits[i, :] = head · x[rows[i]], written to host memory [rows.size(), head.rows]
  virtual void lm_head(const Weight& head, const Activations& x, std::span<const int64_t> rows, float* logits) = 0;
  // Copies rows [first, first + count) to host memory as fp32.
  virtual void read_rows(const Activations& x, int64_t first, int64_t count, float* out) = 0;
};

// The reference backend: fp32 arithmetic on the CPU, multithreaded over the global thread pool.
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace duet::backend
