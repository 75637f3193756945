// The decode GEMM's bandwidth on the device (issue 16): for every projection shape of the Qwen3.5-9B and 1..64 rows,
// the skinny GEMM's weight-read rate for each pipeline variant (kernels.h, SkinnyPipeline), against the device's own
// copy rate measured in the same run. Not a test: a benchmark whose table goes into docs/benchmarks.md.
//   bench_skinny_gemm [--quick]          (--quick: 1, 16 and 64 rows)
//   bench_skinny_gemm --tiles            (every tile count, 1 and 8..64 rows, only the variants that keep each shape's
//                                         production slices, so production's bits: what a plan by row count picks from)
//   bench_skinny_gemm --blocks           (every tile count; each shape's production slices with every pipeline the
//                                         plans use, in blocks of 8, 4 and 2 warps: the same bits, other block sizes)
//   bench_skinny_gemm --regs             (every tile count; each shape's production slices, x step by step: mma.sync
//                                         against wgmma with the weights in registers, the same bits)
//   bench_skinny_gemm --tma              (the TMA engine, launch_skinny_gemm_tma, by slices and stages (8: a
//                                         benchmarks build), against production; its bits checked across m)
//   bench_skinny_gemm --tma-slices       (the TMA engine at 1, 16 and 64 rows, every slice count 1..8, in blocks of
//                                         128 and 64 w rows; the two sizes' bits checked against each other)
//   bench_skinny_gemm --tma-blocks       (the TMA engine at production's slices in blocks of 128 and 64 w rows, 1..64
//                                         rows, and 64-row blocks on a ring of 6 stages; SwiGLU for gate | up;
//                                         production's choice marked; bits checked; beside each shape a read
//                                         kernel's rate on the same bytes, alone and chained)
//   bench_skinny_gemm --cublas           (production beside cuBLASLt: its heuristic's first algorithm and the best of
//                                         its first 8 at each m, GB/s and TFLOP/s; not batch-invariant, a reference)
//   bench_skinny_gemm --profile SHAPE M   (three production launches of one shape, for ncu; nothing timed)
// Weights rotate over enough copies that every call reads from HBM, as a decode step does (each layer's weights are
// cold). Each figure is the median of 7 timings of a CUDA graph of calls. It also checks, per variant, that m = 1
// gives row 0 of m = 64 bit for bit (the batch-invariance contract) and that the variants that keep the production
// order of summation give the production bits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/dependent_launch.h"
#include "backend/cuda/kernels.h"
#include "cublaslt_reference.h"

using duet::backend::cuda::bf16;
using duet::backend::cuda::launch_skinny_gemm;
using duet::backend::cuda::launch_skinny_gemm_pipeline;
using duet::backend::cuda::skinny_plan_for;
using duet::backend::cuda::SkinnyPipeline;

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

constexpr size_t kRotationBytes = size_t{512} << 20;  // ten times the H200's 50 MB L2

struct Shape {
  const char* name;
  int32_t n, k;
};

// Fills with random BF16 in [-1, 1) (never zeros: they can run faster than real data).
__global__ void fill_random(bf16* p, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = __float2bfloat16(static_cast<float>(z >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f);
  }
}

// Reads every 16 bytes of p once (the weights' access pattern without the arithmetic): the read-rate ceiling.
__global__ void read_all(const uint4* __restrict__ p, size_t count, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

// read_all as a dependent launch (dependent_launch.h) whose blocks let the next launch start at once: back to back,
// each call's ramp overlaps the tail of the call before, as the GEMMs' do in the bench and in small steps. The
// fastest a kernel reads a weight of that many bytes from HBM in such a chain: the size's own read rate, which a
// 33 MB weight's few microseconds keep below the 1 GiB figure.
__global__ void read_all_chained(const uint4* __restrict__ p, size_t count, uint32_t* sink) {
  duet::backend::cuda::let_dependents_launch();
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u)
    *sink = acc;  // keeps the loads (never true on the bench's random weights' copies: a race
                  // between chained calls would write one word no figure reads)
}

// Copies count 16-byte words from p to q: the copy rate as a kernel moves it (torch's copy_ moves about the same; a
// device-to-device cudaMemcpyAsync was 35% slower on the H200, 2,768 against 4,229 GB/s, 37th round).
__global__ void copy_all(const uint4* __restrict__ p, uint4* __restrict__ q, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    q[i] = __ldg(p + i);
}

// The register-fed kernels as production's plans run them (skinny_plan_for), whichever engine the process takes
// (skinny_tma_for): the tables' "production" column and the bits their variants must keep.
void register_fed(const bf16* x, int32_t m, const bf16* w, const Shape& shape, bf16* y, cudaStream_t stream) {
  launch_skinny_gemm_pipeline(x, m, w, shape.n, shape.k, y, skinny_plan_for(shape.n, shape.k, m), stream);
}

// Enough copies of a shape's random weights that every call of a timing loop reads them from HBM, as a decode step
// does (each layer's weights are cold): copy(i) for call i.
struct RotatedWeights {
  bf16* data = nullptr;
  size_t elems;
  int copies;
  explicit RotatedWeights(const Shape& shape)
      : elems(static_cast<size_t>(shape.n) * shape.k),
        copies(static_cast<int>(std::max<size_t>(1, kRotationBytes / (elems * sizeof(bf16))))) {
    check(cudaMalloc(&data, elems * copies * sizeof(bf16)), "malloc w");
    fill_random<<<1024, 256>>>(data, elems * copies, 11 + shape.n);
    check(cudaDeviceSynchronize(), "fill");
  }
  ~RotatedWeights() { cudaFree(data); }
  const bf16* copy(int i) const { return data + elems * static_cast<size_t>(i % copies); }
  RotatedWeights(const RotatedWeights&) = delete;
  RotatedWeights& operator=(const RotatedWeights&) = delete;
};

template <typename Launch>
float median_ms_per_call(Launch launch, int calls, cudaStream_t stream);

// GB/s of reading a rotation's weights by a kernel that does nothing else, call c reading copy c, as the GEMMs are
// timed: alone (plain launches, grid-stride over every SM) and chained (dependent launches, read_all_chained).
struct SameBytesRead {
  double alone_gbs, chained_gbs;
};
SameBytesRead same_bytes_read(const RotatedWeights& rotation, cudaStream_t stream) {
  uint32_t* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(uint32_t)), "malloc sink");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sm count");
  const size_t words = rotation.elems * sizeof(bf16) / 16;
  const double bytes = static_cast<double>(rotation.elems * sizeof(bf16));
  const int calls = std::max(rotation.copies, 20);
  const auto word_copy = [&](int c) { return reinterpret_cast<const uint4*>(rotation.copy(c)); };
  const float alone_ms = median_ms_per_call(
      [&](int c) { read_all<<<sms * 4, 512, 0, stream>>>(word_copy(c), words, sink); }, calls, stream);
  const float chained_ms = median_ms_per_call(
      [&](int c) {
        duet::backend::cuda::launch_dependent("read_all_chained", read_all_chained, dim3(sms * 4), dim3(512), 0, stream,
                                              word_copy(c), words, sink);
      },
      calls, stream);
  cudaFree(sink);
  return {bytes / (alone_ms * 1e-3) / 1e9, bytes / (chained_ms * 1e-3) / 1e9};
}

template <typename Launch>
float median_ms_per_call(Launch launch, int calls, cudaStream_t stream) {
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "capture");
  for (int i = 0; i < calls; ++i) launch(i);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  check(cudaGraphLaunch(exec, stream), "warm-up");
  std::vector<float> times;
  for (int rep = 0; rep < 7; ++rep) {
    cudaEventRecord(a, stream);
    check(cudaGraphLaunch(exec, stream), "replay");
    cudaEventRecord(b, stream);
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    times.push_back(ms / static_cast<float>(calls));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::vector<uint16_t> download_bits(const bf16* p, size_t count) {
  std::vector<uint16_t> out(count);
  check(cudaMemcpy(out.data(), p, count * 2, cudaMemcpyDeviceToHost), "download");
  return out;
}

float bf16_bits_to_float(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// max |a - b| / max |b| over BF16 outputs.
double relative_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_bits_to_float(a[i]), y = bf16_bits_to_float(b[i]);
    worst = std::max(worst, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return scale > 0 ? worst / scale : worst;
}

// --tma: for each shape and row count, the register-fed plans' GB/s beside the TMA engine's ("4/sN": 4 stages at two
// blocks an SM, "8/sN" 8 at one; at the slices that fill the SMs once, and half and twice those). Bits: each variant at
// every m gives the first m rows of its own m = 64 bit for bit (batch invariance), and its m = 64 lies within 2% of max
// |y| of production's (the same products summed in other groups: a wrong layout or descriptor lands far outside).
// Returns the failures.
int bench_tma(const std::vector<Shape>& shapes, const bf16* x, bf16* y, bf16* y64, double read_gbs,
              cudaStream_t stream) {
  using duet::backend::cuda::launch_skinny_gemm_tma;
  using duet::backend::cuda::SkinnyOutputs;
  struct Variant {
    int stages, slices, block_rows = 128;
  };
  auto tma = [&](int32_t m, const bf16* w, const Shape& shape, bf16* out, const Variant& v) {
    SkinnyOutputs o;
    o.y[0] = out;
    o.first[1] = shape.n;
    launch_skinny_gemm_tma(x, m, w, shape.n, shape.k, o, false, stream, v.slices, v.stages, v.block_rows);
  };
  const std::vector<int32_t> row_counts = {1, 8, 16, 32, 48, 64};
  int failures = 0;
  for (const Shape& shape : shapes) {
    const RotatedWeights rotation(shape);
    const size_t weight_elems = rotation.elems;
    const int copies = rotation.copies;
    const bf16* weights = rotation.data;
    register_fed(x, 64, weights, shape, y64, stream);
    check(cudaStreamSynchronize(stream), "production");
    const auto production = download_bits(y64, static_cast<size_t>(64) * shape.n);
    const int four = duet::backend::cuda::skinny_tma_slices(shape.n, shape.k);
    const int eight = std::max(1, four / 2);  // one block an SM: half the resident blocks
    std::vector<Variant> variants = {{4, four}};
#ifdef DUET_SKINNY_EXPERIMENTS
    variants.push_back({8, eight});
    // 8 stages at the production slices: a deeper ring a block without fewer blocks (a 4,096-row shape has a block an
    // SM either way), so the same bits as production's at 4 stages.
    if (eight != four) variants.push_back({8, four});
    // 256-row blocks at one block an SM: half the row blocks of 128, so twice the slices that fill the SMs once.
    const int64_t blocks256 = (shape.n + 255) / 256;
    variants.push_back({4, static_cast<int>(std::clamp<int64_t>(132 / blocks256, 1, 8)), 256});
#endif
    if (four > 1) variants.push_back({4, four / 2});
    if (four < 8) variants.push_back({4, std::min(8, four * 2)});
    std::printf("%-20s %4s %10s", shape.name, "m", "production");
    for (const Variant& v : variants)
      std::printf("  tma%s %d/s%d", v.block_rows == 256 ? "256" : "", v.stages, v.slices);
    std::printf("   (GB/s of weights read; the best TMA as %% of the read rate)\n");
    std::vector<std::vector<uint16_t>> whole(variants.size());
    for (size_t i = 0; i < variants.size(); ++i) {
      tma(64, weights, shape, y64, variants[i]);
      check(cudaStreamSynchronize(stream), "tma m = 64");
      whole[i] = download_bits(y64, static_cast<size_t>(64) * shape.n);
      const double distance = relative_difference(whole[i], production);
      std::printf("  tma%s %d/s%d at m = 64 against production: max |difference| / max |y| = %.3g%s\n",
                  variants[i].block_rows == 256 ? "256" : "", variants[i].stages, variants[i].slices, distance,
                  distance < 2e-2 ? "" : "  [FAR]");
      if (!(distance < 2e-2)) ++failures;
    }
    for (int32_t m : row_counts) {
      const int calls = std::max(copies, 20);
      const float production_ms = median_ms_per_call(
          [&](int i) { register_fed(x, m, weights + weight_elems * (i % copies), shape, y, stream); }, calls, stream);
      std::printf("%-20s %4d %10.0f", shape.name, m, weight_elems * sizeof(bf16) / (production_ms * 1e-3) / 1e9);
      double best = 0;
      for (size_t i = 0; i < variants.size(); ++i) {
        tma(m, weights, shape, y, variants[i]);
        check(cudaStreamSynchronize(stream), "tma");
        const auto rows = download_bits(y, static_cast<size_t>(m) * shape.n);
        const bool invariant = std::equal(rows.begin(), rows.end(), whole[i].begin());
        if (!invariant) ++failures;
        const float ms = median_ms_per_call(
            [&](int c) { tma(m, weights + weight_elems * (c % copies), shape, y, variants[i]); }, calls, stream);
        const double gbs = weight_elems * sizeof(bf16) / (ms * 1e-3) / 1e9;
        best = std::max(best, gbs);
        std::printf("  %10.0f%s", gbs, invariant ? " " : "!");
      }
      std::printf("   %3.0f%% of read\n", 100.0 * best / read_gbs);
    }
  }
  std::printf("tma bit checks (! = rows of m differ from m = 64's; FAR = not production's products): %d failed\n",
              failures);
  return failures;
}
// --tma-slices: the TMA engine's GB/s at 1, 16 and 64 rows for every slice count 1..8, in blocks of 128 and of 64 w
// rows (block_rows 128 and 64). Each slice count sums in its own order; the two block sizes of one slice count give
// the same bits (checked: the 64-row blocks' m = 64 against the 128-row blocks'). A table to choose skinny_tma_slices
// by.
int bench_tma_slices(const std::vector<Shape>& shapes, const bf16* x, bf16* y, bf16* y64, double read_gbs,
                     cudaStream_t stream) {
  std::printf("%-20s %4s %6s", "shape", "m", "block");
  for (int slices = 1; slices <= 8; ++slices) std::printf("  %6s%d", "s", slices);
  std::printf("   (GB/s of weights read; production's slices marked *; read rate %.0f)\n", read_gbs);
  int failures = 0;
  for (const Shape& shape : shapes) {
    const RotatedWeights rotation(shape);
    const int production = duet::backend::cuda::skinny_tma_slices(shape.n, shape.k);
    auto launch = [&](int32_t m, const bf16* w, bf16* out_rows, int slices, int block_rows) {
      duet::backend::cuda::SkinnyOutputs o;
      o.y[0] = out_rows;
      o.first[1] = shape.n;
      duet::backend::cuda::launch_skinny_gemm_tma(x, m, w, shape.n, shape.k, o, false, stream, slices, 4, block_rows);
    };
    for (int slices = 1; slices <= 8; ++slices) {  // the 64-row blocks' bits at m = 64: the 128-row blocks'
      launch(64, rotation.copy(0), y64, slices, 128);
      check(cudaStreamSynchronize(stream), "tma 128-row blocks");
      const auto reference = download_bits(y64, static_cast<size_t>(64) * shape.n);
      launch(64, rotation.copy(0), y64, slices, 64);
      check(cudaStreamSynchronize(stream), "tma 64-row blocks");
      if (download_bits(y64, static_cast<size_t>(64) * shape.n) != reference) {
        std::printf("%-20s 64-row blocks at %d slices: bits differ from the 128-row blocks'\n", shape.name, slices);
        ++failures;
      }
    }
    for (int32_t m : {1, 16, 64})
      for (int block_rows : {128, 64}) {
        std::printf("%-20s %4d %6d", shape.name, m, block_rows);
        for (int slices = 1; slices <= 8; ++slices) {
          const float ms = median_ms_per_call([&](int c) { launch(m, rotation.copy(c), y, slices, block_rows); },
                                              std::max(rotation.copies, 20), stream);
          std::printf("  %6.0f%s", rotation.elems * sizeof(bf16) / (ms * 1e-3) / 1e9, slices == production ? "*" : " ");
        }
        std::printf("\n");
        std::fflush(stdout);
      }
  }
  std::printf("block bit checks: %d failed\n", failures);
  return failures;
}

// --tma-blocks: the TMA engine at production's slices in blocks of 128 w rows (two consumer warpgroups, two an SM)
// against blocks of 64 (one, three an SM), at 1, 8, 16, 24, 32, 48 and 64 rows, gate | up with SwiGLU in the epilogue
// as the model runs it; production's choice (skinny_tma_blocks) marked. Bits: every row count's rows in either
// block size against the same rows of one m = 64 call in 128-row blocks. The table the line of half_block_rows_above is
// read from.
int bench_tma_blocks(const std::vector<Shape>& shapes, const bf16* x, bf16* y, bf16* y64, double read_gbs,
                     double copy_gbs, cudaStream_t stream) {
  std::printf(
      "%-20s %4s %10s %10s %10s   (GB/s of weights read, production's slices; * production's choice, then its share "
      "of the copy rate %.0f and of the chained read of the same bytes; read rate %.0f)\n",
      "shape", "m", "128-row", "64-row", "64-row x6", copy_gbs, read_gbs);
  int failures = 0;
  for (const Shape& shape : shapes) {
    const RotatedWeights rotation(shape);
    const SameBytesRead same = same_bytes_read(rotation, stream);
    std::printf("%-20s read of the same %.1f MB by a read kernel: %.0f GB/s alone, %.0f chained (%.0f%% of copy)\n",
                shape.name, rotation.elems * sizeof(bf16) / 1e6, same.alone_gbs, same.chained_gbs,
                100.0 * same.chained_gbs / copy_gbs);
    const bool swiglu = std::string(shape.name) == "mlp.gate|up";
    const int32_t out_width = swiglu ? shape.n / 2 : shape.n;
    auto launch = [&](int32_t m, const bf16* w, bf16* out_rows, int block_rows, int stages = 4) {
      duet::backend::cuda::SkinnyOutputs o;
      o.y[0] = out_rows;
      o.first[1] = shape.n;
      if (swiglu) o.swiglu_half = shape.n / 2;
      duet::backend::cuda::launch_skinny_gemm_tma(x, m, w, shape.n, shape.k, o, false, stream, 0, stages, block_rows);
    };
    launch(64, rotation.copy(0), y64, 128);
    check(cudaStreamSynchronize(stream), "tma m = 64");
    const auto whole = download_bits(y64, static_cast<size_t>(64) * out_width);
    for (int32_t m : {1, 8, 16, 24, 32, 48, 64}) {
      std::printf("%-20s %4d", shape.name, m);
      const auto chosen = duet::backend::cuda::skinny_tma_blocks(m, shape.n, shape.k, swiglu);
      double chosen_gbs = 0.0;
      // 128-row blocks, 64-row blocks, and 64-row blocks on a ring of 6 stages (deep_ring_for's).
      for (const auto& [block_rows, stages] : {std::pair{128, 4}, std::pair{64, 4}, std::pair{64, 6}}) {
        launch(m, rotation.copy(0), y, block_rows, stages);
        check(cudaStreamSynchronize(stream), "tma");
        const auto rows = download_bits(y, static_cast<size_t>(m) * out_width);
        const bool same = std::equal(rows.begin(), rows.end(), whole.begin());
        if (!same) ++failures;
        const float ms = median_ms_per_call([&](int c) { launch(m, rotation.copy(c), y, block_rows, stages); },
                                            std::max(rotation.copies, 20), stream);
        const double gbs = rotation.elems * sizeof(bf16) / (ms * 1e-3) / 1e9;
        const bool production = block_rows == chosen.block_rows && stages == chosen.stages;
        if (production) chosen_gbs = gbs;
        std::printf(" %10.0f%s%s", gbs, production ? "*" : " ", same ? "" : " [rows differ from m = 64's]");
      }
      std::printf("   %3.0f%% of copy, %3.0f%% of the same bytes' chained read\n", 100.0 * chosen_gbs / copy_gbs,
                  100.0 * chosen_gbs / same.chained_gbs);
      std::fflush(stdout);
    }
  }
  std::printf("block bit checks: %d failed\n", failures);
  return failures;
}

// --cublas: for each shape and row count, production's GB/s beside cuBLASLt's (issue 16 item 1 asks for the
// comparison): the heuristic's first algorithm for that m (what a caller of cuBLASLt would get; it may split k, so
// its rows' bits depend on m) and the fastest of the heuristic's first 8, each as GB/s of weights read and TFLOP/s,
// the best as a share of the read rate. Weights rotate as for the other tables; 64 MB of workspace (the backend's).
// Units per second in billions (0 for no time).
double rate(double units, float ms) { return ms > 0 ? units / (ms * 1e-3) / 1e9 : 0.0; }

int bench_cublas(const std::vector<Shape>& shapes, const bf16* x, bf16* y, double read_gbs, cudaStream_t stream) {
  for (const Shape& shape : shapes) {
    const RotatedWeights rotation(shape);
    const int calls = std::max(rotation.copies, 20);
    duet::testing::CublasLtReference lt(shape.n, shape.k, 64, size_t{64} << 20);
    std::printf("%-16s %4s %12s %12s %12s %6s  %s\n", shape.name, "m", "production", "lt first", "lt best of 8",
                "% read", "(GB/s of weights read, TFLOP/s in brackets; the heuristic's first algorithm)");
    for (int32_t m : {1, 8, 16, 32, 64}) {
      const double bytes = static_cast<double>(rotation.elems * sizeof(bf16)), flops = 2.0 * m * rotation.elems;
      const float production =
          median_ms_per_call([&](int i) { register_fed(x, m, rotation.copy(i), shape, y, stream); }, calls, stream);
      const int offered = lt.choose(m, 8);
      float first = 0, best = 0;
      for (int a = 0; a < offered; ++a) {
        const float ms =
            median_ms_per_call([&](int i) { lt.run(a, m, rotation.copy(i), x, y, stream); }, calls, stream);
        if (a == 0) first = ms;
        if (best == 0 || ms < best) best = ms;
      }
      const float fastest = best > 0 ? std::min(production, best) : production;
      const std::string first_algo = offered > 0 ? lt.describe(0) : "(no algorithm)";
      std::printf("%-16s %4d %5.0f (%4.0f) %5.0f (%4.0f) %5.0f (%4.0f) %5.0f%%  %s\n", shape.name, m,
                  rate(bytes, production), rate(flops, production) / 1e3, rate(bytes, first), rate(flops, first) / 1e3,
                  rate(bytes, best), rate(flops, best) / 1e3, 100.0 * rate(bytes, fastest) / read_gbs,
                  first_algo.c_str());
    }
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const bool blocks = argc > 1 && std::string(argv[1]) == "--blocks";
  const bool regs = argc > 1 && std::string(argv[1]) == "--regs";
  const bool tiles = blocks || regs || (argc > 1 && std::string(argv[1]) == "--tiles");
  const bool quick = tiles || (argc > 1 && std::string(argv[1]) == "--quick");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

  // The copy rate: a 1 GiB copy by a kernel, bytes read plus bytes written (the issue's bar); beside it the same copy
  // by cudaMemcpyAsync, which the rounds before the 37th quoted as the copy rate.
  const size_t copy_bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, copy_bytes), "malloc");
  check(cudaMalloc(&dst, copy_bytes), "malloc");
  cudaMemset(src, 1, copy_bytes);
  const float copy_ms = median_ms_per_call(
      [&](int) {
        copy_all<<<132 * 8, 512, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst),
                                              copy_bytes / 16);
      },
      4, stream);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  const float memcpy_ms = median_ms_per_call(
      [&](int) { check(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream), "copy"); }, 4, stream);
  const double memcpy_gbs = 2.0 * copy_bytes / (memcpy_ms * 1e-3) / 1e9;
  uint32_t* sink = static_cast<uint32_t*>(dst);
  const float read_ms = median_ms_per_call(
      [&](int) { read_all<<<132 * 8, 512, 0, stream>>>(static_cast<const uint4*>(src), copy_bytes / 16, sink); }, 4,
      stream);
  const double read_gbs = copy_bytes / (read_ms * 1e-3) / 1e9;
  cudaFree(src);
  cudaFree(dst);
  std::printf(
      "copy rate: %.0f GB/s (read + write of a 1 GiB copy kernel; cudaMemcpyAsync %.0f GB/s); read rate: %.0f GB/s (a "
      "1 "
      "GiB read kernel)\n",
      copy_gbs, memcpy_gbs, read_gbs);

  // The 9B's projections as the CUDA backend launches them for decode rows (fused where they share an input).
  const std::vector<Shape> shapes = {
      {"gdn.qkv|z|b|a", 12352, 4096}, {"gdn.out_proj", 4096, 4096}, {"attn.q|k|v", 10240, 4096},
      {"attn.o_proj", 4096, 4096},    {"mlp.gate|up", 24576, 4096}, {"mlp.down", 4096, 12288},
      {"lm_head", 248320, 4096},
  };
  std::vector<SkinnyPipeline> variants;
  // 6 and 7 slices: a weight of 4096 rows is 32 row blocks, and at most 30 clusters of 8 fit at once (ncu's "max
  // active clusters"), so 8 slices run in two waves.
  for (int slices : {2, 4, 6, 7, 8})
    for (SkinnyPipeline p : {SkinnyPipeline{1, 4, slices}, SkinnyPipeline{2, 8, slices}}) variants.push_back(p);
  // The production plans with x staged a step at a time (where whole-slice staging would apply: up to 16 rows).
  for (SkinnyPipeline p : {SkinnyPipeline{1, 4, 2, true}, SkinnyPipeline{1, 4, 4, true}, SkinnyPipeline{2, 8, 7, true},
                           SkinnyPipeline{1, 4, 7, true}})
    variants.push_back(p);
  if (tiles)  // the other step-by-step x variants of production's slices
    for (SkinnyPipeline p : {SkinnyPipeline{2, 8, 2, true}, SkinnyPipeline{2, 8, 4, true}}) variants.push_back(p);
  // The kernel compiled for 3 blocks an SM (80 registers; one step of w ahead): by slices, and step by step.
  for (int slices : {2, 4, 7}) {
    SkinnyPipeline p{1, 4, slices};
    p.min_blocks = 3;
    variants.push_back(p);
    p.per_step_x = true;
    variants.push_back(p);
  }
  if (argc > 3 && std::string(argv[1]) == "--profile") {
    for (const Shape& shape : shapes) {
      if (shape.name != std::string(argv[2])) continue;
      const int32_t m = std::atoi(argv[3]);
      bf16 *px = nullptr, *pw = nullptr, *py = nullptr;
      check(cudaMalloc(&px, size_t{64} * static_cast<size_t>(shape.k) * sizeof(bf16)), "malloc x");
      check(cudaMalloc(&pw, static_cast<size_t>(shape.n) * shape.k * sizeof(bf16)), "malloc w");
      check(cudaMalloc(&py, size_t{64} * shape.n * sizeof(bf16)), "malloc y");
      fill_random<<<256, 256>>>(px, size_t{64} * static_cast<size_t>(shape.k), 7);
      fill_random<<<1024, 256>>>(pw, static_cast<size_t>(shape.n) * shape.k, 11);
      check(cudaDeviceSynchronize(), "fill");
      for (int i = 0; i < 3; ++i) launch_skinny_gemm(px, m, pw, shape.n, shape.k, py, false, stream);
      check(cudaDeviceSynchronize(), "profile");
      return 0;
    }
    std::fprintf(stderr, "--profile: no shape %s\n", argv[2]);
    return 1;
  }
  const std::vector<int32_t> row_counts = blocks  ? std::vector<int32_t>{1, 2, 4, 8, 12, 16}
                                          : tiles ? std::vector<int32_t>{1, 8, 16, 24, 32, 40, 48, 56, 64}
                                          : quick ? std::vector<int32_t>{1, 16, 64}
                                                  : std::vector<int32_t>{1, 8, 16, 32, 64};

  bf16* x = nullptr;
  check(cudaMalloc(&x, size_t{64} * 12288 * sizeof(bf16)), "malloc x");
  fill_random<<<256, 256>>>(x, size_t{64} * 12288, 7);
  int32_t widest = 0;
  for (const Shape& shape : shapes) widest = std::max(widest, shape.n);
  bf16* y = nullptr;
  check(cudaMalloc(&y, size_t{64} * widest * sizeof(bf16)), "malloc y");
  bf16* y64 = nullptr;
  check(cudaMalloc(&y64, size_t{64} * widest * sizeof(bf16)), "malloc y");
  if (argc > 1 && std::string(argv[1]) == "--tma") return bench_tma(shapes, x, y, y64, read_gbs, stream) == 0 ? 0 : 1;
  if (argc > 1 && std::string(argv[1]) == "--tma-slices") {
    return bench_tma_slices(shapes, x, y, y64, read_gbs, stream) == 0 ? 0 : 1;
  }
  if (argc > 1 && std::string(argv[1]) == "--tma-blocks")
    return bench_tma_blocks(shapes, x, y, y64, read_gbs, copy_gbs, stream) == 0 ? 0 : 1;
  if (argc > 1 && std::string(argv[1]) == "--cublas") return bench_cublas(shapes, x, y, read_gbs, stream);

  // --blocks: the plans' pipelines in each block size, the shape's slices filled in per shape (max_slices 0).
  if (blocks) {  // the pipeline blocks of 4 and 2 warps are built for (skinny_gemm.cu), against 8-warp blocks
    variants.clear();
    for (int warps : {8, 4, 2})
      for (bool per_step : {false, true}) {
        SkinnyPipeline p{1, 4, 0, per_step};
        p.block_warps = warps;
        variants.push_back(p);
      }
  }
  // --regs: 8-warp blocks, x step by step, one step ahead, L2 4 ahead: mma.sync, then wgmma with w in registers as
  // the plans take it, and its experiments where this build has them (DUET_SKINNY_EXPERIMENTS: a benchmarks build):
  // two steps of w ahead, L2 8 ahead, x through registers.
  if (regs) {
    variants.clear();
    SkinnyPipeline p{1, 4, 0, true};
    variants.push_back(p);
    p.wgmma_registers = true;
    variants.push_back(p);
#ifdef DUET_SKINNY_EXPERIMENTS
    for (const auto& [ahead, prefetch, x_regs] :
         {std::tuple{2, 4, false}, std::tuple{1, 8, false}, std::tuple{1, 4, true}, std::tuple{2, 4, true}}) {
      p.ahead = ahead;
      p.prefetch = prefetch;
      p.x_through_registers = x_regs;
      variants.push_back(p);
    }
    p = SkinnyPipeline{1, 4, 0, true};
    p.wgmma_registers = true;
    p.min_blocks = 3;
    variants.push_back(p);
#endif
  }
  auto label = [](const SkinnyPipeline& v) {
    char text[48];
    if (v.wgmma_registers) {
      std::snprintf(text, sizeof text, "%s%sra%d/p%d/s%d", v.min_blocks == 3 ? "3" : " ",
                    v.x_through_registers ? "xr" : "  ", v.ahead, v.prefetch, v.max_slices);
    } else {
      std::snprintf(text, sizeof text, "%s%s%sa%d/p%d/s%d",
                    v.block_warps != 8 ? (v.block_warps == 4 ? "w4" : "w2") : "", v.min_blocks == 3 ? "3" : "",
                    v.per_step_x ? "x" : " ", v.ahead, v.prefetch, v.max_slices);
    }
    return std::string(text);
  };
  std::printf("%-20s %4s", "shape", "m");
  for (const auto& v : variants) std::printf(" %s", label(v).c_str());
  std::printf(" production   (GB/s of weights read; the best as %% of the read rate; * production's plan)\n");
  int failures = 0;
  std::vector<std::string> fingerprints, agreement;
  for (const Shape& shape : shapes) {
    const RotatedWeights rotation(shape);
    const size_t weight_elems = rotation.elems;
    const int copies = rotation.copies;
    const bf16* weights = rotation.data;
    // Bits: production m = 64 and m = 1 (row 0) on copy 0.
    register_fed(x, 64, weights, shape, y64, stream);
    cudaStreamSynchronize(stream);
    const auto production = download_bits(y64, static_cast<size_t>(64) * shape.n);
    // A fingerprint of the production bits, so that two builds (a kernel change that must keep every bit) can be
    // compared by running both.
    uint64_t fnv = 0xcbf29ce484222325ull;
    for (const uint16_t v : production) fnv = (fnv ^ v) * 0x100000001b3ull;
    fingerprints.push_back(std::string(shape.name) + " " + std::to_string(fnv));
    for (int32_t m : row_counts) {
      std::printf("%-20s %4d", shape.name, m);
      double best = 0;
      for (SkinnyPipeline v : variants) {
        if (v.max_slices == 0) v.max_slices = skinny_plan_for(shape.n, shape.k, m).max_slices;  // --blocks
        if (tiles && v.max_slices != skinny_plan_for(shape.n, shape.k, m).max_slices) {
          std::printf("  %9s ", "-");  // other slices sum in another order: not a plan's choice
          continue;
        }
        // Blocks of 4 or 2 warps are built for up to 16 rows: their bits against production's first 16.
        const int32_t check_rows = v.block_warps == 8 ? 64 : 16;
        launch_skinny_gemm_pipeline(x, check_rows, weights, shape.n, shape.k, y64, v, stream);
        launch_skinny_gemm_pipeline(x, 1, weights, shape.n, shape.k, y, v, stream);
        check(cudaStreamSynchronize(stream), "variant");
        const auto all = download_bits(y64, static_cast<size_t>(check_rows) * shape.n);
        const auto one = download_bits(y, static_cast<size_t>(shape.n));
        const bool invariant = std::equal(one.begin(), one.end(), all.begin());
        const SkinnyPipeline plan = skinny_plan_for(shape.n, shape.k, m);
        const bool is_plan =
            plan.max_slices == v.max_slices && plan.wgmma_registers == v.wgmma_registers && plan.ahead == v.ahead &&
            plan.prefetch == v.prefetch && plan.x_through_registers == v.x_through_registers &&
            plan.min_blocks == v.min_blocks &&
            (v.wgmma_registers || (plan.per_step_x == v.per_step_x && plan.block_warps == v.block_warps));
        // Both kernels (mma.sync, wgmma with w in registers) sum in the same k16 groups and order, so the same slices
        // give production's bits whichever runs (a variant with other slices sums in another order: only its distance
        // is printed).
        const bool production_bits =
            plan.max_slices != v.max_slices || std::equal(all.begin(), all.end(), production.begin());
        if (m == row_counts.front() && plan.max_slices != v.max_slices)
          agreement.push_back(std::string(shape.name) + " " + label(v) + ": " +
                              std::to_string(relative_difference(all, production)));
        if (!invariant || !production_bits) {
          ++failures;
          std::printf(" [%s]", !invariant ? "NOT INVARIANT" : "OTHER BITS");
        }
        const int calls = std::max(copies, 20);
        const float ms = median_ms_per_call(
            [&](int i) {
              launch_skinny_gemm_pipeline(x, m, weights + weight_elems * (i % copies), shape.n, shape.k, y, v, stream);
            },
            calls, stream);
        const double gbs = weight_elems * sizeof(bf16) / (ms * 1e-3) / 1e9;
        best = std::max(best, gbs);
        std::printf("  %9.0f%s", gbs, is_plan ? "*" : " ");
      }
      // Production itself (skinny_plan_for: which engine for these rows, its pipeline).
      const int calls = std::max(copies, 20);
      const float production_ms = median_ms_per_call(
          [&](int i) { register_fed(x, m, weights + weight_elems * (i % copies), shape, y, stream); }, calls, stream);
      std::printf("  %9.0f   %3.0f%% of read\n", weight_elems * sizeof(bf16) / (production_ms * 1e-3) / 1e9,
                  100.0 * best / read_gbs);
    }
  }
  for (const std::string& line : fingerprints) std::printf("production bits at m = 64 (FNV-1a): %s\n", line.c_str());
  for (const std::string& line : agreement)
    std::printf("other slices against production, max |difference| / max |y| at m = 64: %s\n", line.c_str());
  std::printf("bit checks: %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
