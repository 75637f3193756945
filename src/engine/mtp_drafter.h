#pragma once
// `--draft mtp`: the checkpoint's MTP layer drafts the next tokens of decoding sequences (tools/qwen35_mtp_spec.md,
// docs/mtp.md). MTP row j reads the main model's final-norm row at j and the token at j + 1, writes its K/V at j in
// the MTP layer's own pages and predicts the token at j + 2; so every position a sequence keeps gets its MTP row once
// the token after it is known (prompt chunks, then each step's kept rows), and the last of them drafts the first token.
// Draft k > 1 feeds back draft k - 1's row after mtp.norm and its token, one position on. Draft rows write K/V past the
// kept positions; the next step's rows write those positions again before any row reads them.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"

namespace duet::engine {

class MtpDrafter {
 public:
  // The MTP layer's K/V in `pages` pages, named by the same ids as the main storage's (one page table per sequence).
  MtpDrafter(model::Model& model, int64_t pages);

  // One sequence's MTP rows of a step: positions [position, position + tokens.size()), `hidden` the main model's
  // final-norm rows there, `tokens` the token after each; then `drafts` tokens drafted after the last row (0: the rows
  // only fill the MTP K/V).
  struct Rows {
    std::span<const int32_t> page_table;
    int32_t position = 0;
    std::span<const float> hidden;
    std::vector<int32_t> tokens;
    int32_t drafts = 0;
  };
  // Runs every entry's rows as one MTP step, then one step per draft position over the entries still drafting; the
  // drafts of each entry, in order (each the most likely token of its row: drafts need not follow the request's
  // sampling, since verification keeps only what its own draws confirm).
  std::vector<std::vector<int32_t>> run(std::span<const Rows> rows);

  backend::StateStorage& storage() { return *storage_; }

 private:
  model::Model& model_;
  std::unique_ptr<backend::StateStorage> storage_;
};

}  // namespace duet::engine
