// cuBLASLt opened on first use (src/backend/cuda/cublaslt_loader.h): a process that links the CUDA backend does not
// map the library until a cuBLASLt function is called, and the forwarders hand every argument on (descriptors made
// through them read back, through the library's own getters, what was set). Needs the toolkit's libcublasLt, not a
// GPU: descriptors are host objects. Skipped, with the loader's reason, where the library is missing.
#include "backend/cuda/cublaslt_loader.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace duet::backend::cuda {
namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

// The library's own getter (not one duet forwards), from the copy the loader opened.
template <class Function>
Function library_function(const char* name) {
  void* handle = dlopen(cublaslt_loaded_from().c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  return handle != nullptr ? reinterpret_cast<Function>(dlsym(handle, name)) : nullptr;
}

TEST(CublasLtLoader, OpensOnFirstUseAndForwardsEveryArgument) {
  // Nothing in this process has called cuBLASLt yet: the library is not mapped (it was, linked, at every start).
  ASSERT_FALSE(mapped("libcublasLt")) << "libcublasLt is mapped before any cuBLASLt call";

  cublasLtMatrixLayout_t layout = nullptr;
  const cublasStatus_t created = cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 3, 5, 7);
  if (created == CUBLAS_STATUS_NOT_INITIALIZED && !cublaslt_load_error().empty())
    GTEST_SKIP() << "libcublasLt could not be opened here: " << cublaslt_load_error();
  ASSERT_EQ(created, CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(mapped("libcublasLt")) << cublaslt_loaded_from();
  EXPECT_EQ(cublaslt_load_error(), "");

  using LayoutGet = cublasStatus_t (*)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, void*, size_t, size_t*);
  const auto layout_get = library_function<LayoutGet>("cublasLtMatrixLayoutGetAttribute");
  ASSERT_NE(layout_get, nullptr);
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  uint32_t type = 0;
  size_t written = 0;
  ASSERT_EQ(layout_get(layout, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &written), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(layout_get(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols, &written), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(layout_get(layout, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld, &written), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(layout_get(layout, CUBLASLT_MATRIX_LAYOUT_TYPE, &type, sizeof type, &written), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(rows, 3u);
  EXPECT_EQ(cols, 5u);
  EXPECT_EQ(ld, 7);
  EXPECT_EQ(type, static_cast<uint32_t>(CUDA_R_16BF));
  const int32_t batches = 4;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batches, sizeof batches),
            CUBLAS_STATUS_SUCCESS);
  int32_t batch_count = 0;
  ASSERT_EQ(layout_get(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch_count, sizeof batch_count, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(batch_count, 4);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t transpose = CUBLAS_OP_T;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
            CUBLAS_STATUS_SUCCESS);
  using DescGet = cublasStatus_t (*)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, void*, size_t, size_t*);
  const auto desc_get = library_function<DescGet>("cublasLtMatmulDescGetAttribute");
  ASSERT_NE(desc_get, nullptr);
  int32_t compute = 0, transa = 0, transb = -1;
  ASSERT_EQ(desc_get(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, sizeof compute, &written),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(desc_get(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa, &written), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(desc_get(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb, &written), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(compute, static_cast<int32_t>(CUBLAS_COMPUTE_32F));
  EXPECT_EQ(transa, static_cast<int32_t>(CUBLAS_OP_T));
  EXPECT_EQ(transb, static_cast<int32_t>(CUBLAS_OP_N));  // control: the attribute not set keeps its default
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulPreference_t preference = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  const uint64_t workspace = 12345678;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                 sizeof workspace),
            CUBLAS_STATUS_SUCCESS);
  using PreferenceGet =
      cublasStatus_t (*)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, void*, size_t, size_t*);
  const auto preference_get = library_function<PreferenceGet>("cublasLtMatmulPreferenceGetAttribute");
  ASSERT_NE(preference_get, nullptr);
  uint64_t workspace_read = 0;
  ASSERT_EQ(preference_get(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_read, sizeof workspace_read,
                           &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(workspace_read, workspace);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(preference), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
}  // namespace duet::backend::cuda
