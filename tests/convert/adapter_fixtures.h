#pragma once
// Test helpers for the adapter tools: the tiny base and its "merged" fine-tune (tools/make_adapter_fixtures.py: the
// base plus a planted rank-4 difference in every projection, F32 norms rounded to BF16), the planted factors, temp
// folders, and adapter folders extracted from the fixtures or rewritten to damage them.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../tests_dir.h"
#include "checkpoint/adapter_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "convert/adapter_extraction.h"

namespace duet::testing {

namespace fs = std::filesystem;

inline std::string fixture(const std::string& relative) {
  return (fs::path(tests_dir()) / "fixtures" / relative).string();
}
inline std::string tiny_base_dir() { return fixture("models/tiny-mm-clef"); }
inline std::string tiny_merged_dir() { return fixture("models/tiny-mm-clef-merged"); }
inline std::string planted_delta_file() { return fixture("adapter/tiny-mm-clef-delta.safetensors"); }
constexpr int64_t kPlantedRank = 4;

// A folder under the temp directory named after the running test, removed when it goes out of scope.
class TempFolder {
 public:
  explicit TempFolder(const std::string& tag = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    static int count = 0;
    path_ = fs::temp_directory_path() / (std::string("duet_adapter_") + info->test_suite_name() + "_" + info->name() +
                                         tag + "_" + std::to_string(count++));
    fs::remove_all(path_);
  }
  ~TempFolder() { fs::remove_all(path_); }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// `duet adapter` on the fixtures, into `out`.
inline convert::ExtractionReport extract_tiny_adapter(const std::string& out, int64_t rank = 256,
                                                      convert::SvdMethod svd = convert::SvdMethod::automatic,
                                                      bool lm_head_rows = false) {
  convert::ExtractionOptions options;
  options.merged_dir = tiny_merged_dir();
  options.base_dir = tiny_base_dir();
  options.out_dir = out;
  options.rank = rank;
  options.svd = svd;
  options.lm_head_rows = lm_head_rows;
  return convert::extract_adapter(options);
}

// Rewrites adapter.safetensors of the folder through `edit` (on owned copies of its tensors), then re-signs
// SHA256SUMS.json, so the loader's other checks, not the checksum, meet the damage.
struct OwnedTensor {
  std::string name;
  checkpoint::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
inline void rewrite_factors(const std::string& folder, const std::function<void(std::vector<OwnedTensor>&)>& edit) {
  namespace format = checkpoint::adapter_format;
  const std::string path = (fs::path(folder) / format::kFactorsFile).string();
  std::vector<OwnedTensor> tensors;
  {
    const auto factors = checkpoint::Checkpoint::open_file(path);
    for (const std::string& name : factors.names()) {
      const auto* t = factors.find(name);
      tensors.push_back({name, t->dtype, t->shape, {t->bytes.begin(), t->bytes.end()}});
    }
  }
  edit(tensors);
  std::vector<checkpoint::TensorToWrite> out;
  for (const auto& t : tensors) out.push_back({t.name, t.dtype, t.shape, checkpoint::as_bytes_of(t.bytes)});
  checkpoint::write_safetensors(path, out);
  format::sign_folder(folder);
}

}  // namespace duet::testing
