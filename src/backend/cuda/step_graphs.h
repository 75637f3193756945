#pragma once
// Decode steps replayed as CUDA graphs. A decode step is some 500 small launches (norms, adds, GEMMs, conv, delta
// rule, attention, sampling for 32 layers), each costing the host a few microseconds to enqueue, which is as much as
// many of them run on the GPU. Every kernel argument of a decode step is an address in the plan buffer (each array at
// a fixed place, step_upload.h) or the workspace, a weight, or one of the step's counts; so two decode steps with the
// same key launch exactly the same kernels with exactly the same arguments, and the second can replay the first's
// graph: the plan upload before it carries everything that differs (ids, positions, pages, sampling settings).
// Replaying changes no result: the graph holds the same kernels in the same order on the same stream.
// A step with structured outputs' masks stops its graph before the sampler, whose masks the host writes while the
// graph runs (StepGraphKey::masks).
#include <cuda_runtime.h>

#include <compare>
#include <cstdint>
#include <map>
#include <vector>

namespace duet::backend::cuda {

// The shape of a decode step: what its launches' grids and loop counts follow. Everything else a launch takes is at
// a fixed address (step_upload.h) or a weight; StepGraphs still compares those arguments before every replay.
struct StepGraphKey {
  int64_t rows = 0, pieces = 0, samples = 0;
  // What the sampling kernel's PenaltyTables hold (null or not): the storage's counts, verify rows' extra ids, biases.
  bool counts = false, extra_ids = false, biases = false;
  // Structured outputs' token masks present: the graph ends at the logits, and the sampler is launched after it, once
  // the host has written the masks (cuda_backend.cc sample(), mask_upload.h). Without: the graph holds the sampler.
  bool masks = false;
  bool rope = false;  // rows' 3-D rotary positions present (DeviceStep::row_rope: a rope delta after images)
  // The delta rule's chunks, pieces of several rows and their chunks (DeviceStep): fixed by rows and pieces when every
  // piece is one row; a verify piece's rows may end one chunk and start the next. few_pieces: the pieces of a few rows
  // the decode kernels take (not fixed by the rest: 4 + 1 rows and 3 + 2 rows are both 2 pieces of 5 rows).
  int32_t chunks = 0, multi_pieces = 0, multi_chunks = 0, few_pieces = 0;
  // One-row pieces that complete their chunk: their fold is a kernel of its own, launched only when there are some.
  int32_t fold_pieces = 0;
  auto operator<=>(const StepGraphKey&) const = default;
};

class StepGraphs {
 public:
  StepGraphs() = default;
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;
  ~StepGraphs() { clear(); }

  // Starts a graphed step. True: the key's graph exists, the step's launches are to be skipped and launch() called.
  // False: the stream's work is captured from here until launch(). `arguments` are the values the step's launches
  // take (addresses, counts): a key whose graph was captured with other arguments is a bug, refused with an error
  // rather than replayed into wrong results.
  bool begin(const StepGraphKey& key, std::vector<uintptr_t> arguments, cudaStream_t stream);
  // Ends a capture begun by begin() and keeps its graph, then launches the key's graph on `stream`.
  void launch(cudaStream_t stream);
  // Ends a capture left open by a step that failed, keeping nothing.
  void abandon(cudaStream_t stream);
  // Forgets every graph (the plan buffer or workspace moved).
  void clear();

 private:
  struct Captured {
    cudaGraphExec_t exec = nullptr;
    std::vector<uintptr_t> arguments;
  };
  std::map<StepGraphKey, Captured> graphs_;
  StepGraphKey key_;
  std::vector<uintptr_t> arguments_;
  bool capturing_ = false;
};

}  // namespace duet::backend::cuda
