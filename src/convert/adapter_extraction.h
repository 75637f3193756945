#pragma once
// `duet adapter`: re-expresses a merged checkpoint (a fine-tune of the base, all weights stored) as the base plus a
// runtime adapter folder (checkpoint/adapter_format.h). Tensor by tensor: equal tensors are skipped; a projection that
// differs is factored by SVD of (merged - base) in fp32 (convert/low_rank.h) and written as BF16 factors; an F32
// tensor of the base that the merge only rounded to BF16 (A_log, GDN norms) is reported and not adapted; anything
// else that differs (embeddings, norms, the output head) is refused, since no adapter could carry it. Every check
// runs before anything is written, and one tensor is held at a time.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "convert/low_rank.h"

namespace duet::convert {

struct ExtractionOptions {
  std::string merged_dir;
  std::string base_dir;
  std::string out_dir;  // must not exist, or be empty
  int64_t rank = 256;   // capped per projection at its full rank
  SvdMethod svd = SvdMethod::automatic;
  bool lm_head_rows = false;  // also write lm_head_rows.safetensors (the base's output embedding)
  std::function<void(const std::string&)> progress = [](const std::string&) {};
};

// How well one module's factors, as stored in BF16, reproduce the merge. floor is what storing the merge in BF16
// costs, in expectation: sqrt(sum spacing(m)^2 / 12) over its values m (round to nearest within a BF16 spacing). A
// residual near the floor means the adapter is as exact as the merged checkpoint's own storage: what remains is the
// merge's rounding noise, which no low-rank product reproduces.
struct ModuleFit {
  std::string key;  // layers.{i}.{module}
  int64_t out = 0, in = 0, rank = 0;
  bool randomized = false;
  double difference = 0;  // || merged - base ||_F
  double residual = 0;    // || (merged - base) - B A ||_F
  double floor = 0;
  double seconds = 0;
};

struct ExtractionReport {
  std::vector<ModuleFit> modules;
  std::vector<std::string> rounding_only;  // F32 in the base, its BF16 rounding in the merge: not adapted
  int64_t equal_tensors = 0;
  double seconds = 0;
};

ExtractionReport extract_adapter(const ExtractionOptions& options);

}  // namespace duet::convert
