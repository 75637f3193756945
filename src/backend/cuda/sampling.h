#pragma once
// Token sampling on the device with the CPU sampler's semantics (src/backend/cpu/sampler.h), so that a decode step
// copies back a few bytes per row instead of [rows, vocab] logits. For the same logits, parameters, token counts and
// position, launch_sample picks the token engine::sample_token picks, and reports the same raw logprob and top
// logprobs (log_softmax of the unpenalized logits, ties to the lowest id).
//
// Same transforms in the same order and precision as sampler.cc: the penalties in fp32, the temperature division in
// fp32, weights exp(double(logit) - max) in double, candidates in the CPU's order (id order, or logit descending then
// id ascending once top-k or top-p is on), the top-p and min-p cuts, and the draw seeded_uniform(seed, position)
// walked over probabilities w / total. How the kernel gets the CPU's sums without summing 248k terms one by one on
// one thread is explained at the top of sampling.cu.
//
// Asynchronous on `stream`, allocates nothing (scratch comes from the caller), throws duet::Error when the launch or
// its arguments are bad. Row invariance: a row's outputs depend on that row's logits, parameters, its slot's penalty
// counts, extra ids and biases only, never on the other rows of the call nor on how many there are.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/sampling_knobs.h"

namespace duet::backend::cuda {

// The most top logprobs a row can ask for (the server caps top_logprobs at 20).
constexpr int32_t kMaxTopLogprobs = 20;
// Candidates the kernel keeps in shared memory and walks in the CPU's order on one thread (see sampling.cu).
constexpr int32_t kSamplingTile = 2048;

// One row's sampling parameters: the knobs, the logprobs asked for, the draw's key, and what its penalties read.
// Plain data, copied to the device as an array [rows].
struct SamplingRowParams : SamplingKnobs {
  int32_t top_logprobs = -1;  // -1: no logprobs; 0: the sampled token's; n (<= kMaxTopLogprobs): also the n best
  uint64_t seed = 0;
  int64_t position = 0;  // the absolute position the draw is keyed by (sample_token's `position`)
  // The slot of PenaltyTables::counts whose words the penalties read (backend/penalty_counts.h); -1: none.
  int32_t counts_slot = -1;
  // Ids generated before this row that the slot's counts do not hold yet, each one more generated (SampleSpec::
  // extra_generated): extra_ids[extra_offset, extra_offset + extra_count). An id may repeat.
  int32_t extra_offset = 0;
  int32_t extra_count = 0;
  // logit_bias: biases[bias_offset, bias_offset + bias_count), added after the penalties in order.
  int32_t bias_offset = 0;
  int32_t bias_count = 0;
  // A structured output's token mask (grammar/token_mask.h): words masks[mask_offset, mask_offset + mask_words), bit
  // (id % 32) of word (id / 32) set where the id may be drawn; a missing word allows nothing. Applied after the
  // penalties as the CPU does (sampler.h step 2c): every other logit is -inf. mask_offset < 0: no mask.
  int64_t mask_offset = -1;
  int32_t mask_words = 0;
};

// One logit_bias entry (SampleSpec::logit_bias): ids outside [0, vocab) are skipped, as on the CPU.
struct BiasEntry {
  int32_t id = 0;
  float bias = 0.0f;
};

// What the rows' penalties and biases read, on the device; each may be null when no row reads it.
struct PenaltyTables {
  // [slots, counts_vocab] count words (penalty_counts.h: bit 31 in the prompt, bits 0-30 times generated), read by
  // rows whose counts_slot >= 0 and a penalty on. counts_vocab must be the logits' vocab.
  const uint32_t* counts = nullptr;
  int32_t counts_vocab = 0;
  const int32_t* extra_ids = nullptr;  // SamplingRowParams::extra_offset / extra_count index it
  const BiasEntry* biases = nullptr;   // SamplingRowParams::bias_offset / bias_count index it
};

// How a row was decided (bits of DeviceSample::path), for tests and counters; never needed to use the result.
enum SamplingPath : uint32_t {
  kPathGreedy = 1u << 0,      // temperature <= 0: the argmax of the penalized logits
  kPathNoFinite = 1u << 1,    // every scaled logit was -inf: the argmax of the penalized logits, as the CPU
  kPathSorted = 1u << 2,      // candidates in (logit desc, id asc) order (top-k or top-p on); else id order
  kPathTile = 1u << 3,        // the candidates fit one tile: the CPU's loops ran on them as they are
  kPathCertified = 1u << 4,   // a cut or the draw was decided by bounds that prove the CPU's answer
  kPathStream = 1u << 5,      // the CPU's loops ran over the whole candidate order, tile after tile
  kPathExactTopP = 1u << 6,   // the top-p total was summed in the CPU's order because bounds did not decide
  kPathEmpty = 1u << 7,       // no candidate survived (the CPU has undefined behaviour there): the argmax
  kPathBinned = 1u << 8,      // top-p decided by weight bins (sampling_binned.h), or top-k's set gathered by them
  kPathStreamBins = 1u << 9,  // with kPathStream: its sorted order (a prefix of it at least) came from the weight
                              // bins at once (sampling_binned.h, sorted_prefix_by_bins), not tile by tile
};

struct DeviceSample {
  int32_t id = 0;
  float logprob = 0;      // log_softmax(raw logits)[id] when top_logprobs >= 0, else NaN
  int32_t top_count = 0;  // top logprobs written: min(top_logprobs, kMaxTopLogprobs, vocab), 0 when none asked
  uint32_t path = 0;      // SamplingPath bits
  uint32_t ns = 0;        // the row's time inside the kernel (block 0's thread 0, %globaltimer): a diagnostic
};

// Rows whose ids are the step before's draws (StepPlan::carried): ids[r] < 0 holds -(1 + the draw's index) and becomes
// that draw's id, read from `draws` (the step before's DeviceSample, where its sampler left them). One small launch
// before the step's graph, so that the graph reads its ids where they always are. `counts_slots` ([rows], or null:
// none): a carried row whose entry is >= 0 also adds one generated to that slot's word of its id in `counts`
// ([slots, vocab] words, penalty_counts.h) before the step's sampler reads them (CarriedId::counts_slot).
void launch_carry_draws(int32_t* ids, int32_t rows, const DeviceSample* draws, const int32_t* counts_slots,
                        uint32_t* counts, int32_t vocab, cudaStream_t stream);

struct DeviceTopLogprob {
  int32_t id = -1;
  float logprob = 0;
};

// For tests only: the default leaves results untouched.
struct SamplingTestHooks {
  bool flip_draw = false;     // draw with 1 - u instead of u (a planted fault: ids must change)
  bool force_stream = false;  // skip the tile and certified shortcuts: the CPU's loops over the whole order
  int32_t tile_cap = 0;       // candidates per tile, 1..kSamplingTile (0: kSamplingTile); small values force the
                              // paths that large vocabularies take
  bool old_top_p = false;     // the kernel as before the weight bins (radix top-p / top-k, running-max log-sum-exp), as
                              // DUET_SAMPLING_TOPP=old does
  int32_t binned_keep_shift = 0;  // planted faults in the binned path: its top-p cut and its drawn entry moved by
  int32_t binned_draw_shift = 0;  // this many places (ids must change)
};

#ifdef DUET_SAMPLING_TRACE
// The hang locator's record of one thread (sampling_trace.h); cluster_line carries kSamplingTraceArrive or
// kSamplingTraceWait in its high bits.
struct SamplingTraceSlot {
  uint32_t sync_line;
  uint32_t cluster_line;
  uint32_t entered;
  uint32_t cluster_ops;
};
constexpr uint32_t kSamplingTraceArrive = 0x40000000u, kSamplingTraceWait = 0x80000000u;
// Prints, per block of the last traced launch's first `clusters` clusters, the threads grouped by where they are; to
// be called while a launch is stuck (it reads host-mapped memory only, no CUDA call).
void print_sampling_trace(int32_t clusters);
#endif

// Bytes of device scratch launch_sample needs for `rows` rows of `vocab` logits (about 8 * vocab bytes per row, for
// at most 128 rows: rows beyond share the slots, one after another). Each row is sampled by a cluster of 8 blocks
// (sampling.cu): one scratch slot per cluster.
size_t sampling_scratch_bytes(int32_t rows, int32_t vocab);

// Samples one token per row of `logits` [rows, vocab] fp32 (row-major, device). params [rows], the tables and the
// mask words they point into are on the device; masks may be null when every mask_offset is negative. A row reads
// only its own slot's counts, extras, biases and mask: rows stay independent. Writes out[rows]; top [rows,
// kMaxTopLogprobs] gets each row's top logprobs (most likely first, unused entries id -1) unless null. scratch: at
// least sampling_scratch_bytes(rows, vocab) bytes of device memory, 256-byte aligned.
void launch_sample(const float* logits, int32_t rows, int32_t vocab, const SamplingRowParams* params,
                   const PenaltyTables& tables, DeviceSample* out, DeviceTopLogprob* top, void* scratch,
                   size_t scratch_bytes, cudaStream_t stream, const SamplingTestHooks& hooks = {},
                   const uint32_t* masks = nullptr);

}  // namespace duet::backend::cuda
