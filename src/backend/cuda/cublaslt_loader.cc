#include "backend/cuda/cublaslt_loader.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <string>
#include <vector>

namespace duet::backend::cuda {

namespace {

struct CublasLtLibrary {
  void* handle = nullptr;
  std::string path;   // where it was opened from
  std::string error;  // why not, when handle is null
};

// The soname the headers were built against first, found as the linked library was (LD_LIBRARY_PATH, then the
// executable's run path, which holds the build's toolkit folder: src/backend/cuda/CMakeLists.txt, then the loader's
// cache), then that folder by its path (a binary whose run path was removed), then the toolkit's usual places.
const CublasLtLibrary& cublaslt_library() {
  static const CublasLtLibrary opened = [] {
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    std::vector<std::string> candidates = {name};
#ifdef DUET_CUDA_LIBRARY_DIR
    candidates.push_back(std::string(DUET_CUDA_LIBRARY_DIR) + "/" + name);
#endif
    candidates.push_back("/usr/local/cuda/lib64/" + name);
    candidates.push_back("/usr/local/cuda/lib/" + name);
    CublasLtLibrary result;
    for (const std::string& candidate : candidates) {
      // RTLD_LOCAL: its symbols stay out of the global scope, so they never meet the forwarders below.
      if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        result.handle = handle;
        result.path = candidate;
        result.error.clear();
        return result;
      }
      const char* why = dlerror();
      result.error += (result.error.empty() ? "" : "; ") + candidate + ": " + (why != nullptr ? why : "not found");
    }
    return result;
  }();
  return opened;
}

// The library's definition of `name`, typed as the header declares it; null when the library or the name is missing.
template <class Function>
Function resolve_cublaslt(const char* name) {
  const CublasLtLibrary& lib = cublaslt_library();
  return lib.handle != nullptr ? reinterpret_cast<Function>(dlsym(lib.handle, name)) : nullptr;
}

}  // namespace

std::string cublaslt_loaded_from() { return cublaslt_library().path; }
std::string cublaslt_load_error() { return cublaslt_library().error; }

}  // namespace duet::backend::cuda

// The forwarders: each resolves its function once and calls it with the same arguments.
using duet::backend::cuda::resolve_cublaslt;

template <class Function, class... Args>
static cublasStatus_t forward(Function function, Args... args) {
  return function != nullptr ? function(args...) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtCreate)>("cublasLtCreate");
  return forward(f, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtDestroy)>("cublasLtDestroy");
  return forward(f, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                                           cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                                           cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t d_layout,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmul)>("cublasLtMatmul");
  return forward(f, handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d, d_layout, algo, workspace,
                 workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatrixLayoutCreate)>("cublasLtMatrixLayoutCreate");
  return forward(f, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatrixLayoutDestroy)>("cublasLtMatrixLayoutDestroy");
  return forward(f, layout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attribute,
                                                             const void* value, size_t bytes) {
  static const auto f =
      resolve_cublaslt<decltype(&cublasLtMatrixLayoutSetAttribute)>("cublasLtMatrixLayoutSetAttribute");
  return forward(f, layout, attribute, value, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmulDescCreate)>("cublasLtMatmulDescCreate");
  return forward(f, desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmulDescDestroy)>("cublasLtMatmulDescDestroy");
  return forward(f, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attribute, const void* value,
                                                           size_t bytes) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmulDescSetAttribute)>("cublasLtMatmulDescSetAttribute");
  return forward(f, desc, attribute, value, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmulPreferenceCreate)>("cublasLtMatmulPreferenceCreate");
  return forward(f, preference);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmulPreferenceDestroy)>("cublasLtMatmulPreferenceDestroy");
  return forward(f, preference);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                                 cublasLtMatmulPreferenceAttributes_t attribute,
                                                                 const void* value, size_t bytes) {
  static const auto f =
      resolve_cublaslt<decltype(&cublasLtMatmulPreferenceSetAttribute)>("cublasLtMatmulPreferenceSetAttribute");
  return forward(f, preference, attribute, value, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_layout,
    cublasLtMatrixLayout_t b_layout, cublasLtMatrixLayout_t c_layout, cublasLtMatrixLayout_t d_layout,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[], int* returned) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmulAlgoGetHeuristic)>("cublasLtMatmulAlgoGetHeuristic");
  return forward(f, handle, desc, a_layout, b_layout, c_layout, d_layout, preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                                 cublasLtMatmulAlgoConfigAttributes_t attribute,
                                                                 void* value, size_t bytes, size_t* written) {
  static const auto f =
      resolve_cublaslt<decltype(&cublasLtMatmulAlgoConfigGetAttribute)>("cublasLtMatmulAlgoConfigGetAttribute");
  return forward(f, algo, attribute, value, bytes, written);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                    cublasLtMatrixLayout_t a_layout, cublasLtMatrixLayout_t b_layout,
                                                    cublasLtMatrixLayout_t c_layout, cublasLtMatrixLayout_t d_layout,
                                                    const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulHeuristicResult_t* result) {
  static const auto f = resolve_cublaslt<decltype(&cublasLtMatmulAlgoCheck)>("cublasLtMatmulAlgoCheck");
  return forward(f, handle, desc, a_layout, b_layout, c_layout, d_layout, algo, result);
}
