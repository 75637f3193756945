#pragma once
// `duet convert-norms SRC OUT`: a copy of a checkpoint whose F32 linear_attn.norm.weight tensors (the GDN norms, F32 in
// the stock Qwen3.5 releases) are BF16, for tools that want one dtype. Each value is rounded to nearest even, the
// bits torch's cast gives for every non-NaN value; a NaN stays a (quiet) NaN. Every other tensor keeps its bytes:
// shards with a norm are rewritten tensor by tensor, all other files (shards without one, config, tokenizer) are
// hard-linked, or copied where a link fails; the index's total_size is rewritten (less 2 bytes a converted value). A
// checkpoint without an F32 norm is refused before anything is written.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace duet::convert {

struct NormConversionReport {
  std::vector<std::string> converted;  // tensor names
  std::vector<std::string> rewritten;  // files written anew
  std::vector<std::string> linked;     // files hard-linked
  std::vector<std::string> copied;     // files copied (a hard link failed)
  int64_t total_size = 0;  // the index's new total_size (the old one less the bytes saved); else every tensor's bytes
};

NormConversionReport convert_norms(
    const std::string& src, const std::string& out,
    const std::function<void(const std::string&)>& progress = [](const std::string&) {});

// Whether a tensor is a GDN norm by its name (*.linear_attn.norm.weight); it converts those stored as F32.
bool is_gdn_norm_name(std::string_view name);

}  // namespace duet::convert
