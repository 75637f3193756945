#include "decision/cuda/device_head.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_rows.h"
#include "backend/cuda/kernels.h"
#include "base/error.h"
#include "base/log.h"
#include "decision/cuda/head_kernels.h"

namespace duet::decision::cuda {

using backend::cuda::check_cuda;

bool device_head_wanted() {
  const char* value = std::getenv("DUET_DEVICE_HEAD");
  return value == nullptr || std::string_view(value) != "0";
}

AttentionFold attention_fold_from_env() {
  const char* value = std::getenv("DUET_HEAD_FOLD");
  if (value == nullptr) return AttentionFold::by_cost;
  if (std::string_view(value) == "0") return AttentionFold::never;
  if (std::string_view(value) == "1") return AttentionFold::always;
  return AttentionFold::by_cost;
}

bool attention_folds(AttentionFold fold, int64_t queries, int64_t heads, int64_t width) {
  switch (fold) {
    case AttentionFold::never:
      return false;
    case AttentionFold::always:
    case AttentionFold::always_without_value_bias:
      return true;
    case AttentionFold::by_cost:
      break;
  }
  // Unfolded: 2 nm w^2 multiply-adds for the keys and values, then the kernel's 2 nm nq w; folded: 2 nm (nq heads) w
  // for the scores and the weighted sums of the rows, and about nq w^2 + nq w^2 for u and the value heads, which do
  // not grow with nm. Leading terms: folding pays when nq heads < w. (With the unfolded kernel's own work counted,
  // the bound is nq (heads - 1) < w: up to 68 queries rather than 63 for the gate's head; the rule keeps the simpler,
  // safer side. How fast each path's kernels run moves the real crossover: DUET_HEAD_FOLD=1 measures it.)
  return queries * heads < width;
}

namespace {

// Every tensor of the head laid out in one host array, then uploaded at once: offsets now, pointers after.
class WeightPacker {
 public:
  size_t add(std::span<const float> values) {
    const size_t at = values_.size();
    values_.insert(values_.end(), values.begin(), values.end());
    values_.resize((values_.size() + 63) / 64 * 64, 0.0f);  // 256-byte alignment for the next tensor
    return at;
  }
  size_t add(const backend::Weight& w) {  // BF16 widened exactly: its bits are the top half of the fp32's
    std::vector<float> widened(static_cast<size_t>(w.rows * w.cols));
    if (w.type == backend::WeightType::f32) {
      std::memcpy(widened.data(), w.data, widened.size() * sizeof(float));
    } else {
      const auto* bits = static_cast<const uint16_t*>(w.data);
      for (size_t i = 0; i < widened.size(); ++i) {
        const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
        std::memcpy(&widened[i], &u, sizeof u);
      }
    }
    return add(widened);
  }
  std::span<const float> values() const { return values_; }

 private:
  std::vector<float> values_;
};

// Offsets of one layer's tensors while packing; pointers once uploaded (offset + base).
struct Pending {
  std::vector<std::pair<const float**, size_t>> slots;
  void at(const float** slot, size_t offset) { slots.emplace_back(slot, offset); }
};

void pack(WeightPacker& packer, Pending& pending, const LinearWeights& from, DeviceLinear& to) {
  to.in = static_cast<int32_t>(from.weight.cols);
  to.out = static_cast<int32_t>(from.weight.rows);
  pending.at(&to.weight, packer.add(from.weight));
  if (!from.bias.empty()) pending.at(&to.bias, packer.add(from.bias));
}
void pack(WeightPacker& packer, Pending& pending, const LayerNormWeights& from, DeviceLayerNorm& to) {
  pending.at(&to.weight, packer.add(from.weight));
  pending.at(&to.bias, packer.add(from.bias));
}
void pack(WeightPacker& packer, Pending& pending, const AttentionWeights& from, DeviceAttention& to) {
  pack(packer, pending, from.query, to.query);
  pack(packer, pending, from.key, to.key);
  pack(packer, pending, from.value, to.value);
  pack(packer, pending, from.out, to.out);
}

// Device buffers of one head run, made and freed in the order of its stream.
class StreamArena {
 public:
  explicit StreamArena(cudaStream_t stream) : stream_(stream) {}
  ~StreamArena() {
    for (void* p : buffers_) cudaFreeAsync(p, stream_);
  }
  StreamArena(const StreamArena&) = delete;
  StreamArena& operator=(const StreamArena&) = delete;
  template <typename T>
  T* get(int64_t count) {
    void* p = nullptr;
    check_cuda(cudaMallocAsync(&p, static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T), stream_),
               "joint head: device buffer");
    buffers_.push_back(p);
    return static_cast<T*>(p);
  }
  // Gives a buffer back early, in the stream's order (after the work already queued that reads it).
  void release(const void* p) {
    auto it = std::find(buffers_.begin(), buffers_.end(), p);
    if (it == buffers_.end()) return;
    cudaFreeAsync(*it, stream_);
    buffers_.erase(it);
  }
  template <typename T>
  T* upload(std::span<const T> values) {
    T* p = get<T>(static_cast<int64_t>(values.size()));
    if (!values.empty())
      check_cuda(cudaMemcpyAsync(p, values.data(), values.size_bytes(), cudaMemcpyHostToDevice, stream_),
                 "joint head: inputs up");
    return p;
  }

 private:
  cudaStream_t stream_;
  std::vector<void*> buffers_;
};

// With DUET_HEAD_PROFILE=1: the GPU time of each stage of a head run, logged when it ends (apart from DUET_PROFILE,
// which also turns the steps' graphs off).
class StageTimer {
 public:
  explicit StageTimer(cudaStream_t stream) : stream_(stream), on_(std::getenv("DUET_HEAD_PROFILE") != nullptr) {}
  ~StageTimer() {
    for (auto& [name, event] : marks_) cudaEventDestroy(event);
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  void mark(const char* name) {
    if (!on_) return;
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreate(&event), "joint head: profile event");
    check_cuda(cudaEventRecord(event, stream_), "joint head: profile event");
    marks_.emplace_back(name, event);
  }
  // After the stream has synchronised; `folded` of `attentions` over the memory rows took the folded path.
  void log(int64_t rows, int64_t options, int folded, int attentions) const {
    if (!on_ || marks_.size() < 2) return;
    std::string line;
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second);
      line += fmt::format(" {} {:.2f}", marks_[i].first, ms);
    }
    log_info("joint head on the device: {} rows, {} options; ms:{}; folded attentions {} of {}", rows, options, line,
             folded, attentions);
  }

 private:
  cudaStream_t stream_;
  bool on_;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
};

// The forward's operations on one stream (decision/head_math.h's, on the device).
struct HeadRun {
  const DeviceHeadWeights& w;
  int32_t width, heads;
  cudaStream_t stream;
  StreamArena& arena;
  AttentionFold fold;
  int folded = 0, attentions = 0;  // the attentions over memory rows, and how many of them were folded

  float* linear(const float* x, int64_t rows, const DeviceLinear& l, bool gelu = false) {
    float* y = arena.get<float>(rows * l.out);
    backend::cuda::launch_fp32_gemm(x, static_cast<int32_t>(rows), l.weight, l.out, l.in, y, stream);
    launch_bias_gelu(y, rows, l.out, l.bias, gelu, stream);
    return y;
  }
  float* layer_norm(const float* x, int64_t rows, const DeviceLayerNorm& n) {
    float* y = arena.get<float>(rows * width);
    launch_layer_norm(x, rows, width, n.weight, n.bias, y, stream);
    return y;
  }
  void add(float* x, const float* y, int64_t rows) { launch_add(x, y, rows * width, stream); }
  // MultiheadAttention(query, memory, memory) [nq, w]
  float* attention(const float* query, int64_t nq, const float* memory, int64_t nm, const DeviceAttention& a) {
    const float* q = linear(query, nq, a.query);
    const float* k = linear(memory, nm, a.key);
    const float* v = linear(memory, nm, a.value);
    float* mixed = arena.get<float>(nq * width);
    launch_attention(q, static_cast<int32_t>(nq), k, v, static_cast<int32_t>(nm), width, heads, mixed, stream);
    arena.release(k);  // [nm, w] each: a long prompt's keys and values are the run's largest buffers
    arena.release(v);
    return linear(mixed, nq, a.out);
  }
  // The same over the memory rows (the routing's and the decoder's cross-attention): folded where
  // attention_folds() says so. The folded path's scratch (R = nq heads): scores [nm, R], the chunks' partial sums
  // (at most about nm w / 2) and a few [R, w]: with R < w less than the unfolded path's keys and values [nm, 2w].
  float* memory_attention(const float* query, int64_t nq, const float* memory, int64_t nm, const DeviceAttention& a) {
    ++attentions;
    if (!attention_folds(fold, nq, heads, width)) return attention(query, nq, memory, nm, a);
    ++folded;
    const float* q = linear(query, nq, a.query);
    const FoldedAttention folded_attention{
        .q = q,
        .queries = static_cast<int32_t>(nq),
        .memory = memory,
        .rows = static_cast<int32_t>(nm),
        .key_weight = a.key.weight,
        .key_bias = a.key.bias,
        .value_weight = a.value.weight,
        .value_bias = fold == AttentionFold::always_without_value_bias ? nullptr : a.value.bias,
        .width = width,
        .heads = heads};
    auto* scratch = arena.get<unsigned char>(static_cast<int64_t>(
        folded_attention_scratch_bytes(static_cast<int32_t>(nq), static_cast<int32_t>(nm), width, heads)));
    float* mixed = arena.get<float>(nq * width);
    launch_folded_attention(folded_attention, scratch, mixed, stream);
    arena.release(scratch);
    return linear(mixed, nq, a.out);
  }
};

}  // namespace

DeviceJointHead::DeviceJointHead(std::shared_ptr<const JointHead> head, const model::Model& backbone)
    : head_(std::move(head)), backbone_(backbone) {
  const JointHeadConfig& config = head_->config();
  if (config.width % config.heads != 0 || config.width / config.heads > kMaxHeadDim)
    fail("joint head on the device: {} heads of a width of {}: a head is at most {} wide here", config.heads,
         config.width, kMaxHeadDim);
  const JointHeadWeights& from = head_->weights();
  WeightPacker packer;
  Pending pending;
  DeviceHeadWeights& to = weights_;
  pack(packer, pending, from.hidden_norm, to.hidden_norm);
  for (auto [f, t] : {std::pair{&from.memory, &to.memory},
                      {&from.question, &to.question},
                      {&from.option_question, &to.option_question},
                      {&from.global_row, &to.global_row},
                      {&from.option_context, &to.option_context},
                      {&from.option_lexical, &to.option_lexical}})
    pack(packer, pending, *f, *t);
  pending.at(&to.type_embedding, packer.add(from.type_embedding));
  to.evidence_layers.resize(from.evidence_layers.size());
  for (size_t i = 0; i < from.evidence_layers.size(); ++i) {
    const EvidenceLayerWeights& f = from.evidence_layers[i];
    DeviceEvidenceLayer& t = to.evidence_layers[i];
    pack(packer, pending, f.query_norm, t.query_norm);
    pack(packer, pending, f.memory_norm, t.memory_norm);
    pack(packer, pending, f.feedforward_norm, t.feedforward_norm);
    pack(packer, pending, f.attention, t.attention);
    pack(packer, pending, f.feedforward_in, t.feedforward_in);
    pack(packer, pending, f.feedforward_out, t.feedforward_out);
  }
  pack(packer, pending, from.option_summary_norm, to.option_summary_norm);
  to.layers.resize(from.layers.size());
  for (size_t i = 0; i < from.layers.size(); ++i) {
    const DecoderLayerWeights& f = from.layers[i];
    DeviceDecoderLayer& t = to.layers[i];
    pack(packer, pending, f.self_attention, t.self_attention);
    pack(packer, pending, f.cross_attention, t.cross_attention);
    pack(packer, pending, f.linear1, t.linear1);
    pack(packer, pending, f.linear2, t.linear2);
    pack(packer, pending, f.norm1, t.norm1);
    pack(packer, pending, f.norm2, t.norm2);
    pack(packer, pending, f.norm3, t.norm3);
  }
  pack(packer, pending, from.field_norm, to.field_norm);
  pack(packer, pending, from.option_norm, to.option_norm);
  pack(packer, pending, from.scorer_in, to.scorer_in);
  pack(packer, pending, from.scorer_out, to.scorer_out);

  bytes_ = packer.values().size_bytes();
  check_cuda(cudaMalloc(&memory_, bytes_), "joint head: weights on the device");
  check_cuda(cudaMemcpy(memory_, packer.values().data(), bytes_, cudaMemcpyHostToDevice), "joint head: weights up");
  for (auto [slot, offset] : pending.slots) *slot = static_cast<const float*>(memory_) + offset;
  // Stream-ordered allocations of finished decisions stay in the pool for the next ones (they are counted in the
  // memory plan: JointHead::product_memory), rather than going back to the driver at every synchronisation.
  cudaMemPool_t pool = nullptr;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "joint head: device");
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), "joint head: memory pool");
  uint64_t keep = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "joint head: memory pool");
  log_info("joint head on the device: {} MiB of fp32 weights", bytes_ >> 20);
}

DeviceJointHead::~DeviceJointHead() {
  if (memory_ != nullptr) cudaFree(memory_);
}

std::shared_ptr<engine::DecisionSink> DeviceJointHead::new_sink(const Encoding& encoding) const {
  std::unique_ptr<HeadInputGatherer> check;
  if (const char* value = std::getenv("DUET_HEAD_CHECK"); value != nullptr && std::string_view(value) == "1")
    check = std::make_unique<HeadInputGatherer>(head_, backbone_, encoding);
  return std::make_shared<DeviceHeadSink>(*this, span_layout(*head_, backbone_, encoding), std::move(check));
}

DeviceHeadSink::DeviceHeadSink(const DeviceJointHead& head, SpanLayout layout, std::unique_ptr<HeadInputGatherer> check)
    : check_(std::move(check)),
      head_(head),
      layout_(std::move(layout)),
      hidden_(head.head().config().hidden_size),
      width_(head.head().config().width) {
  if (layout_.length > attention_max_memory_rows())
    fail("joint head on the device: a prompt of {} positions is more memory rows than one attention block holds ({})",
         layout_.length, attention_max_memory_rows());
  // The head's questions summarise their options as contiguous runs (encoding order): check it once here.
  for (size_t o = 1; o < layout_.owner.size(); ++o)
    if (layout_.owner[o] < layout_.owner[o - 1]) fail("joint head on the device: options out of question order");
}

// A sink whose head never ran (its decision cancelled or failed) may go on a decision worker while the engine thread
// captures a decode step on the step stream: its buffers are freed on a stream of their own, after the last chunk's
// work on them (rows_done_), never by enqueueing on the step stream from here.
DeviceHeadSink::~DeviceHeadSink() {
  if (memory_ == nullptr && sums_ == nullptr && span_at_ == nullptr && last_row_ == nullptr && kept_.empty()) {
    release(nullptr);  // only the event is left
    return;
  }
  cudaStream_t own = nullptr;
  if (cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) != cudaSuccess) return;  // leaks rather than races
  if (rows_done_ != nullptr) cudaStreamWaitEvent(own, rows_done_, 0);
  release(own);
  cudaStreamDestroy(own);  // its queued frees still run
}

void DeviceHeadSink::release(cudaStream_t stream) {
  // In the order of `stream`, which saw every write and read of them: work still queued there finishes first; and
  // after the copies of the prefixes kept from them.
  for (const auto& kept : kept_) cudaStreamWaitEvent(stream, kept->copied(), 0);
  kept_.clear();
  for (void* p : {static_cast<void*>(memory_), static_cast<void*>(sums_), static_cast<void*>(span_at_),
                  static_cast<void*>(last_row_)})
    if (p != nullptr) cudaFreeAsync(p, stream);
  memory_ = nullptr, sums_ = nullptr, span_at_ = nullptr, last_row_ = nullptr;
  if (rows_done_ != nullptr) cudaEventDestroy(rows_done_);
  rows_done_ = nullptr;
}

DeviceDecisionPrefix::DeviceDecisionPrefix(const float* from, int64_t positions, int64_t width, cudaEvent_t after)
    : positions_(positions), width_(width) {
  const size_t bytes = static_cast<size_t>(positions * width) * sizeof(float);
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "joint head: a kept prefix's stream");
  check_cuda(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "joint head: a kept prefix's event");
  check_cuda(cudaEventCreateWithFlags(&last_read_, cudaEventDisableTiming), "joint head: a kept prefix's event");
  check_cuda(cudaStreamWaitEvent(stream_, after, 0), "joint head: waiting for the rows of a kept prefix");
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&memory_), bytes, stream_), "joint head: a kept prefix");
  check_cuda(cudaMemcpyAsync(memory_, from, bytes, cudaMemcpyDeviceToDevice, stream_), "joint head: a kept prefix");
  check_cuda(cudaEventRecord(copied_, stream_), "joint head: a kept prefix's event");
}

DeviceDecisionPrefix::~DeviceDecisionPrefix() {
  // Each reader's copy re-recorded last_read_ after itself (having waited for the one before): freed after the last.
  if (read_) cudaStreamWaitEvent(stream_, last_read_, 0);
  if (memory_ != nullptr) cudaFreeAsync(memory_, stream_);
  for (cudaEvent_t event : {copied_, last_read_})
    if (event != nullptr) cudaEventDestroy(event);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);  // its queued work still runs
}

void DeviceDecisionPrefix::copy_to(float* to, cudaStream_t stream) const {
  check_cuda(cudaStreamWaitEvent(stream, copied_, 0), "joint head: waiting for a kept prefix");
  if (read_) check_cuda(cudaStreamWaitEvent(stream, last_read_, 0), "joint head: waiting for a kept prefix");
  check_cuda(cudaMemcpyAsync(to, memory_, static_cast<size_t>(positions_ * width_) * sizeof(float),
                             cudaMemcpyDeviceToDevice, stream),
             "joint head: a kept prefix");
  check_cuda(cudaEventRecord(last_read_, stream), "joint head: a kept prefix's event");
  read_ = true;
}

std::shared_ptr<const engine::DecisionPrefix> DeviceHeadSink::keep_prefix(int64_t positions) {
  if (check_ || !error_.empty() || positions <= 0 || positions > layout_.first_span || positions > seen_ ||
      memory_ == nullptr)
    return nullptr;
  auto kept = std::make_shared<const DeviceDecisionPrefix>(memory_, positions, width_, rows_done_);
  kept_.push_back(kept);
  return kept;
}

void DeviceHeadSink::resume_from(std::shared_ptr<const engine::DecisionPrefix> prefix) {
  const auto* kept = dynamic_cast<const DeviceDecisionPrefix*>(prefix.get());
  if (kept == nullptr || check_ || seen_ != 0 || kept->positions() > layout_.first_span || kept->width() != width_)
    fail("joint head on the device: cannot resume from a kept prefix of {} positions (first span at {})",
         prefix ? prefix->positions() : 0, layout_.first_span);
  resumed_ = std::move(prefix);
  seen_ = kept->positions();
}

void DeviceHeadSink::allocate(cudaStream_t stream) {
  rows_stream_ = stream;
  const auto spans = static_cast<int64_t>(layout_.sizes.size());
  check_cuda(cudaEventCreateWithFlags(&rows_done_, cudaEventDisableTiming), "joint head: event");
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&memory_), layout_.length * width_ * sizeof(float), stream),
             "joint head: memory rows");
  check_cuda(
      cudaMallocAsync(reinterpret_cast<void**>(&sums_), std::max<int64_t>(spans * hidden_, 1) * sizeof(double), stream),
      "joint head: span sums");
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&span_at_), layout_.length * sizeof(int32_t), stream),
             "joint head: spans");
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&last_row_), hidden_ * sizeof(float), stream),
             "joint head: last row");
  check_cuda(cudaMemsetAsync(sums_, 0, spans * hidden_ * sizeof(double), stream), "joint head: span sums");
  check_cuda(cudaMemcpyAsync(span_at_, layout_.span_at.data(), layout_.length * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream),
             "joint head: spans up");
  if (resumed_ != nullptr) {  // a resumed prefix's memory rows come first
    static_cast<const DeviceDecisionPrefix&>(*resumed_).copy_to(memory_, stream);
    resumed_.reset();
  }
}

void DeviceHeadSink::take_rows(backend::Backend& backend, const backend::Activations& x, int64_t first_row,
                               int64_t count) {
  // A refusal fails this decision alone (finish() throws it); a device error is fatal to the engine, as everywhere.
  try {
    if (!error_.empty()) return;
    const cudaStream_t stream = backend::cuda::step_stream_of(backend);
    if (x.width() != hidden_)
      fail("joint head on the device: rows of {}, the head reads rows of {}", x.width(), hidden_);
    float* rows = nullptr;
    check_cuda(
        cudaMallocAsync(reinterpret_cast<void**>(&rows), std::max<int64_t>(count * hidden_, 1) * sizeof(float), stream),
        "joint head: a chunk's rows");
    backend::cuda::launch_bf16_to_f32(backend::cuda::device_rows_of(x) + first_row * hidden_, count * hidden_, rows,
                                      stream);
    take_f32_rows(rows, count, stream);
    check_cuda(cudaFreeAsync(rows, stream), "joint head: a chunk's rows");
  } catch (const DeviceError&) {
    throw;
  } catch (const Error& e) {
    error_ = e.what();
    // What this chunk queued before the refusal comes before the buffers are freed (the destructor waits for this).
    if (rows_done_ != nullptr) cudaEventRecord(rows_done_, backend::cuda::step_stream_of(backend));
  }
}

void DeviceHeadSink::take_f32_rows(float* rows, int64_t count, cudaStream_t stream) {
  if (count <= 0 || seen_ + count > layout_.length)
    fail("joint head on the device: {} rows after {} of {}", count, seen_, layout_.length);
  if (memory_ == nullptr) allocate(stream);
  if (stream != rows_stream_) fail("joint head on the device: a decision's chunks came on two streams");
  if (check_) {  // the diagnostic: the host head gets the same rows, before they are normalised here in place
    std::vector<float> host(static_cast<size_t>(count * hidden_));
    check_cuda(cudaMemcpyAsync(host.data(), rows, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream),
               "joint head check: rows down");
    check_cuda(cudaStreamSynchronize(stream), "joint head check");
    check_->add_rows(seen_, count, host);
  }
  const DeviceHeadWeights& w = head_.weights();
  const auto h = static_cast<int32_t>(hidden_);
  launch_layer_norm(rows, count, h, w.hidden_norm.weight, w.hidden_norm.bias, rows, stream);  // LN_hidden, in place
  backend::cuda::launch_fp32_gemm(rows, static_cast<int32_t>(count), w.memory.weight, w.memory.out, w.memory.in,
                                  memory_ + seen_ * width_, stream);
  launch_span_sums(rows, static_cast<int32_t>(count), h, span_at_, seen_, sums_, stream);
  if (seen_ + count == layout_.length)
    check_cuda(cudaMemcpyAsync(last_row_, rows + (count - 1) * hidden_, hidden_ * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream),
               "joint head: last row");
  seen_ += count;
  check_cuda(cudaEventRecord(rows_done_, stream), "joint head: event");
  // After the last chunk the engine thread waits for the step, as a copy of the rows to the host did: the decision's
  // prefill time (Server-Timing `prefill`) then ends when its rows are in, and `head` is the head's own time.
  if (complete()) check_cuda(cudaEventSynchronize(rows_done_), "joint head: the last chunk");
}

void DeviceHeadSink::add_rows(int64_t, int64_t, std::span<const float>) {
  fail("joint head on the device: its rows come on the device (device_rows), not from the host");
}

HeadOutput DeviceHeadSink::run() {
  if (!error_.empty()) fail("{}", error_);
  if (!complete()) fail("decision: the head needs all {} rows, {} came", layout_.length, seen_);
  const JointHead& head = head_.head();
  const JointHeadWeights& host = head.weights();
  const DeviceHeadWeights& w = head_.weights();
  const auto Q = static_cast<int64_t>(layout_.question_types.size());
  const auto N = static_cast<int64_t>(layout_.owner.size());
  const int64_t L = layout_.length, h = hidden_, width = width_;
  for (int32_t type : layout_.question_types)
    if (type < 0 || type > 2) fail("joint head: question type id {} is not 0, 1 or 2", type);
  std::vector<int32_t> first_option(static_cast<size_t>(Q + 1), 0);  // question i's options: [first[i], first[i+1])
  for (int32_t owner : layout_.owner) {
    if (owner < 0 || owner >= Q) fail("joint head: an option belongs to question {} of {}", owner, Q);
    ++first_option[static_cast<size_t>(owner) + 1];
  }
  for (int64_t i = 0; i < Q; ++i) first_option[i + 1] += first_option[i];

  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "joint head: stream");
  HeadOutput out;
  {
    StreamArena arena(stream);
    StageTimer timer(stream);
    check_cuda(cudaStreamWaitEvent(stream, rows_done_, 0), "joint head: wait for the rows");
    timer.mark("start");
    HeadRun run{w, static_cast<int32_t>(width), static_cast<int32_t>(head.config().heads), stream, arena, fold_};
    const int32_t* owner = arena.upload<int32_t>(layout_.owner);
    const int32_t* types = arena.upload<int32_t>(layout_.question_types);
    const int32_t* sizes = arena.upload<int32_t>(layout_.sizes);
    const int32_t* first = arena.upload<int32_t>(first_option);
    const float* lexical = arena.upload<float>(layout_.lexical_means);
    float* means = arena.get<float>((Q + N) * h);  // questions' then options' means
    launch_span_means(sums_, sizes, static_cast<int32_t>(Q + N), static_cast<int32_t>(h), means, stream);
    const float* question_means = means;
    const float* option_means = means + Q * h;

    // Options: R = W_oc c + W_ol l + W_oq q_owner
    float* owner_questions = arena.get<float>(N * h);
    launch_gather(question_means, static_cast<int32_t>(h), owner, static_cast<int32_t>(N), owner_questions, stream);
    float* r = run.linear(option_means, N, w.option_context);
    run.add(r, run.linear(lexical, N, w.option_lexical), N);
    run.add(r, run.linear(owner_questions, N, w.option_question), N);
    timer.mark("options");

    // Routing
    for (const DeviceEvidenceLayer& layer : w.evidence_layers) {
      const float* memory = run.layer_norm(memory_, L, layer.memory_norm);
      run.add(r, run.memory_attention(run.layer_norm(r, N, layer.query_norm), N, memory, L, layer.attention), N);
      arena.release(memory);
      const float* hidden = run.linear(run.layer_norm(r, N, layer.feedforward_norm), N, layer.feedforward_in, true);
      run.add(r, run.linear(hidden, N, layer.feedforward_out), N);
    }
    timer.mark("routing");

    // Questions: b = W_q q; s_i = softmax-weighted sum of question i's R rows; F = b + LN_sum(s) + W_g g + T[type]
    float* f = run.linear(question_means, Q, w.question);
    float* scores = arena.get<float>(N);
    float* summaries = arena.get<float>(Q * width);
    launch_question_summaries(r, f, first, static_cast<int32_t>(Q), static_cast<int32_t>(width), scores, summaries,
                              stream);
    run.add(f, run.layer_norm(summaries, Q, w.option_summary_norm), Q);
    const float* global = run.linear(last_row_, 1, w.global_row);
    launch_add_global_and_type(f, global, w.type_embedding, types, static_cast<int32_t>(Q), static_cast<int32_t>(width),
                               stream);
    timer.mark("questions");

    // Decoder (pre-norm)
    for (const DeviceDecoderLayer& layer : w.layers) {
      const float* x = run.layer_norm(f, Q, layer.norm1);
      run.add(f, run.attention(x, Q, x, Q, layer.self_attention), Q);
      run.add(f, run.memory_attention(run.layer_norm(f, Q, layer.norm2), Q, memory_, L, layer.cross_attention), Q);
      const float* hidden = run.linear(run.layer_norm(f, Q, layer.norm3), Q, layer.linear1, true);
      run.add(f, run.linear(hidden, Q, layer.linear2), Q);
    }
    timer.mark("decoder");
    const float* fields = run.layer_norm(f, Q, w.field_norm);
    const float* o = run.layer_norm(r, N, w.option_norm);
    float* fo = arena.get<float>(N * width);
    launch_gather(fields, static_cast<int32_t>(width), owner, static_cast<int32_t>(N), fo, stream);

    // Scores
    float* features = arena.get<float>(N * 4 * width);
    launch_scorer_features(fo, o, static_cast<int32_t>(N), static_cast<int32_t>(width), features, stream);
    const float* scored = run.linear(run.linear(features, N, w.scorer_in, true), N, w.scorer_out);
    const float log_100 = std::log(100.0f);
    const OptionScoreInputs inputs{.lexical_means = lexical,
                                   .question_means = question_means,
                                   .last_row = last_row_,
                                   .owner = owner,
                                   .fo = fo,
                                   .o = o,
                                   .scored = scored,
                                   .options = static_cast<int32_t>(N),
                                   .hidden = static_cast<int32_t>(h),
                                   .width = static_cast<int32_t>(width),
                                   .prior_scale = std::exp(std::min(host.prior_logit_scale, log_100)),
                                   .joint_scale = std::exp(std::min(host.joint_logit_scale, log_100)),
                                   .gate = 1.0f / (1.0f + std::exp(-host.residual_gate))};
    float* results = arena.get<float>(3 * N);  // logits, prior, joint
    launch_option_scores(inputs, results, results + N, results + 2 * N, stream);
    std::vector<float> values(static_cast<size_t>(3 * N));
    check_cuda(cudaMemcpyAsync(values.data(), results, values.size() * sizeof(float), cudaMemcpyDeviceToHost, stream),
               "joint head: logits down");
    timer.mark("scores");
    check_cuda(cudaStreamSynchronize(stream), "joint head");
    timer.log(L, N, run.folded, run.attentions);
    folded_ = {run.folded, run.attentions};
    out.logits.assign(values.begin(), values.begin() + N);
    out.prior.assign(values.begin() + N, values.begin() + 2 * N);
    out.joint.assign(values.begin() + 2 * N, values.end());
  }  // the arena's buffers go back in the stream's order
  if (check_) {
    const std::vector<float> host = check_->finish();
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < host.size() && i < out.logits.size(); ++i) {
      const double d = std::fabs(out.logits[i] - host[i]) / std::max(1.0, std::fabs(static_cast<double>(host[i])));
      if (d > worst) worst = d, at = i;
    }
    log_info(
        "joint head check: {} rows, {} options: device against host logits, max relative difference {:.3g} "
        "(option {}: {} against {})",
        L, N, worst, at, out.logits.empty() ? 0.0f : out.logits[at], host.empty() ? 0.0f : host[at]);
  }
  release(stream);  // the decision's own buffers too: the head's stream waited for the rows and then read them
  check_cuda(cudaStreamDestroy(stream), "joint head: stream");
  return out;
}

}  // namespace duet::decision::cuda
