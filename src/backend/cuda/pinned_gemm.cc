// PinnedGemm: one cuBLASLt algorithm per weight shape for every m (see pinned_gemm.h for why).
//
// Layouts. cuBLASLt is column-major: D[M, N] = op(A)[M, K] op(B)[K, N]. A row-major [r, c] matrix with row stride c
// is, read column-major, its transpose [c, r] with leading dimension c. So:
//   y row-major [m, n]  = column-major y^T [n, m], ld n        -> D (and C): rows n, cols m, ld n
//   y^T = (x w^T)^T     = w x^T                                -> op(A) = w [n, k], op(B) = x^T [k, m]
//   w row-major [n, k]  = column-major w^T [k, n], ld k        -> A: rows k, cols n, ld k, TRANSA = T (op(A) = w)
//   x row-major [m, k]  = column-major x^T [k, m], ld k        -> B: rows k, cols m, ld k, TRANSB = N
// ("TN", the layout cuBLASLt's Hopper kernels favour.) Only B's and D's column count depends on m.
#include "backend/cuda/pinned_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "base/error.h"

namespace duet::backend::cuda {

namespace {

constexpr int kCandidates = 32;             // heuristic results to try, best first
constexpr uint32_t kPointerAlignment = 16;  // what run() promises (rows of activations sliced from a workspace)

template <typename T>
T config_of(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  size_t written = 0;
  check_cublas(cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written),
               "cublasLtMatmulAlgoConfigGetAttribute");
  return value;
}

// Lower is preferred: no split-K; else split-K reduced in fp32 (the compute type); else any fixed split-K.
int split_k_rank(const cublasLtMatmulAlgo_t& algo) {
  if (config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1) return 0;
  return config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? 1
                                                                                                                    : 2;
}

// Owns a cuBLASLt matmul preference for the constructor's heuristic query.
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { check_cublas(cublasLtMatmulPreferenceCreate(&p), "cublasLtMatmulPreferenceCreate"); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, T value) {
    check_cublas(cublasLtMatmulPreferenceSetAttribute(p, attribute, &value, sizeof(value)),
                 "cublasLtMatmulPreferenceSetAttribute");
  }
};

// Configurations measured faster at every row count that matters on the H200 (sm_90, cuBLAS 13.0) than the heuristic's
// first at the largest m (tests/cuda/pinned_gemm_bench.cc; docs/pinned_gemm_h200.txt, session 30: down_proj at 383
// rows 136.6 -> 70.4 us, at 4,096 563.9 -> 538.0). Picked by what they are, never by a timing taken at start, so the
// pinned algorithm (and so every row's bits) is the same on every start of the same GPU and library; every candidate
// there was row-invariant, and the pin is still checked against every m below. DUET_PINNED_PREFERRED=0: the heuristic.
struct PreferredConfig {
  int64_t n, k;
  uint32_t tile, custom;
  uint16_t cluster;
};
constexpr PreferredConfig kPreferredSm90[] = {
    {4096, 12288, 20, 1, 3},  // mlp.down_proj
    {4096, 4096, 20, 1, 3},   // gdn.in_proj_z, gdn.out_proj, attn.o_proj
    {8192, 4096, 24, 7, 5},   // gdn.in_proj_qkv, attn.q_proj
    {1024, 4096, 18, 3, 5},   // attn.k_proj, attn.v_proj
    // gdn.in_proj_b, in_proj_a and their full-rank adapters' A: 23.4 -> 14.8 us at 383 rows, 23.5 -> 16.5 at 4,096.
    {32, 4096, 12, 2, 5},
    // A runtime adapter's first product x A^T at rank 256 (issue 17 item 4: the adapter's prefill cost): few output
    // columns over a long k, where the heuristic's choice at the largest m ran 50-121 us at every m
    // (docs/benchmarks.md, twenty-first round): [256, 4096] 50.3 -> 19.6 us at 383 rows, 51.0 -> 30.7 at 4,096; [256,
    // 12288] (down_proj's) 120.4 -> 37.7, 121.4 -> 53.6.
    {256, 4096, 15, 1, 3},
    {256, 12288, 17, 0, 3},
};

bool preferred_enabled() {
  const char* env = std::getenv("DUET_PINNED_PREFERRED");
  return env == nullptr || std::string(env) != "0";
}

const PreferredConfig* preferred_for(int64_t n, int64_t k, bool y_f32) {
  if (y_f32 || !preferred_enabled()) return nullptr;  // measured with BF16 outputs
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess || major != 9 ||
      minor != 0)
    return nullptr;
  for (const PreferredConfig& c : kPreferredSm90)
    if (c.n == n && c.k == k) return &c;
  return nullptr;
}

bool is_config(const cublasLtMatmulAlgo_t& algo, const PreferredConfig& c) {
  return config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1 &&
         config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID) == c.tile &&
         config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION) == c.custom &&
         config_of<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) == c.cluster;
}

}  // namespace

std::string describe_cublaslt_algo(const cublasLtMatmulAlgo_t& algo) {
  return fmt::format("algo {} tile {} stages {} split-k {} reduction {} swizzle {} custom {} inner {} cluster {}",
                     config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                     config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                     config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                     config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                     config_of<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
                     config_of<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

PinnedGemm::PinnedGemm(cublasLtHandle_t handle, int64_t n, int64_t k, int64_t max_m, bool y_f32, void* workspace,
                       size_t workspace_bytes)
    : handle_(handle),
      n_(n),
      k_(k),
      max_m_(max_m),
      y_f32_(y_f32),
      workspace_(workspace),
      workspace_bytes_(workspace == nullptr ? 0 : workspace_bytes) {
  const std::string shape = fmt::format("n {} k {} m 1..{} y {}", n, k, max_m, y_f32 ? "f32" : "bf16");
  if (handle == nullptr || n <= 0 || k <= 0 || max_m <= 0) fail("PinnedGemm: bad arguments ({})", shape);
  // The destructor does not run if the constructor throws: release what was created so far before rethrowing.
  try {
    const cudaDataType_t y_type = y_f32 ? CUDA_R_32F : CUDA_R_16BF;
    check_cublas(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    check_cublas(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)),
                 "cublasLtMatmulDescSetAttribute(TRANSA)");
    check_cublas(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)),
                 "cublasLtMatmulDescSetAttribute(TRANSB)");
    check_cublas(cublasLtMatrixLayoutCreate(&w_layout_, CUDA_R_16BF, k, n, k), "cublasLtMatrixLayoutCreate(w)");
    check_cublas(cublasLtMatrixLayoutCreate(&x_layout_, CUDA_R_16BF, k, max_m, k), "cublasLtMatrixLayoutCreate(x)");
    check_cublas(cublasLtMatrixLayoutCreate(&y_layout_, y_type, n, max_m, n), "cublasLtMatrixLayoutCreate(y)");

    Preference preference;
    preference.set<uint64_t>(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes_);
    for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      preference.set<uint32_t>(attribute, kPointerAlignment);

    // The heuristic's candidates at the largest m, best first.
    std::array<cublasLtMatmulHeuristicResult_t, kCandidates> results{};
    int found = 0;
    check_cublas(cublasLtMatmulAlgoGetHeuristic(handle_, op_, w_layout_, x_layout_, y_layout_, y_layout_, preference.p,
                                                kCandidates, results.data(), &found),
                 "cublasLtMatmulAlgoGetHeuristic");
    std::vector<cublasLtMatmulAlgo_t> candidates;
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace_bytes_)
        candidates.push_back(results[i].algo);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return split_k_rank(a) < split_k_rank(b); });
    // A preferred configuration goes first: it may be among the heuristic's answers for a smaller m only, so those
    // are asked too (the bench's union), and the first match is moved to the front.
    if (const PreferredConfig* preferred = preferred_for(n, k, y_f32)) {
      for (int64_t m : {int64_t{4096}, int64_t{1024}, int64_t{383}, int64_t{128}}) {
        if (m > max_m) continue;
        set_m(m);
        int more = 0;
        check_cublas(cublasLtMatmulAlgoGetHeuristic(handle_, op_, w_layout_, x_layout_, y_layout_, y_layout_,
                                                    preference.p, kCandidates, results.data(), &more),
                     "cublasLtMatmulAlgoGetHeuristic");
        for (int i = 0; i < more; ++i)
          if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace_bytes_)
            candidates.push_back(results[i].algo);
      }
      const auto match =
          std::find_if(candidates.begin(), candidates.end(), [&](const auto& a) { return is_config(a, *preferred); });
      if (match != candidates.end()) std::rotate(candidates.begin(), match, match + 1);
    }

    // The first candidate that every m we will call it with accepts. The small m are where cuBLASLt's own choice
    // would differ; 64/65 straddle a common tile edge.
    std::vector<int64_t> checked_m;
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{64}, int64_t{65}, max_m})
      if (m <= max_m && std::find(checked_m.begin(), checked_m.end(), m) == checked_m.end()) checked_m.push_back(m);
    bool pinned = false;
    for (const auto& candidate : candidates) {
      bool accepted = true;
      for (int64_t m : checked_m) {
        set_m(m);
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(handle_, op_, w_layout_, x_layout_, y_layout_, y_layout_, &candidate, &check) !=
                CUBLAS_STATUS_SUCCESS ||
            check.workspaceSize > workspace_bytes_) {
          accepted = false;
          break;
        }
      }
      if (accepted) {
        algo_ = candidate;
        pinned = true;
        break;
      }
    }
    if (!pinned)
      fail(
          "PinnedGemm: none of the {} cuBLASLt algorithms offered for {} (workspace {} bytes) accepts every m in "
          "{{1, 2, 3, 7, 64, 65, {}}}; a smaller max_m or a larger workspace may help",
          candidates.size(), shape, workspace_bytes_, max_m);
    description_ = shape + ": " + describe_cublaslt_algo(algo_);
  } catch (...) {
    if (y_layout_) cublasLtMatrixLayoutDestroy(y_layout_);
    if (x_layout_) cublasLtMatrixLayoutDestroy(x_layout_);
    if (w_layout_) cublasLtMatrixLayoutDestroy(w_layout_);
    if (op_) cublasLtMatmulDescDestroy(op_);
    throw;
  }
}

PinnedGemm::~PinnedGemm() {
  cublasLtMatrixLayoutDestroy(y_layout_);
  cublasLtMatrixLayoutDestroy(x_layout_);
  cublasLtMatrixLayoutDestroy(w_layout_);
  cublasLtMatmulDescDestroy(op_);
}

void PinnedGemm::set_m(int64_t m) {
  const uint64_t cols = static_cast<uint64_t>(m);
  check_cublas(cublasLtMatrixLayoutSetAttribute(x_layout_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)),
               "cublasLtMatrixLayoutSetAttribute(x cols)");
  check_cublas(cublasLtMatrixLayoutSetAttribute(y_layout_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)),
               "cublasLtMatrixLayoutSetAttribute(y cols)");
}

void PinnedGemm::run(const bf16* x, int64_t m, const bf16* w, void* y, cudaStream_t stream) {
  if (m < 0 || m > max_m_) fail("PinnedGemm::run: m {} outside 0..{} (n {} k {})", m, max_m_, n_, k_);
  if (m == 0) return;
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y)) %
          kPointerAlignment !=
      0)
    fail("PinnedGemm::run: x, w and y must be {}-byte aligned (n {} k {})", kPointerAlignment, n_, k_);
  const float alpha = 1.0f, beta = 0.0f;
  // Layout descriptors are read on the host during cublasLtMatmul, so changing them after it returns is safe (also
  // under CUDA graph capture); the lock keeps two host threads from interleaving set_m and the call.
  std::lock_guard<std::mutex> lock(mutex_);
  set_m(m);
  check_cublas(cublasLtMatmul(handle_, op_, &alpha, w, w_layout_, x, x_layout_, &beta, y, y_layout_, y, y_layout_,
                              &algo_, workspace_, workspace_bytes_, stream),
               "cublasLtMatmul (PinnedGemm::run)");
}

}  // namespace duet::backend::cuda
