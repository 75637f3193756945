#include "engine/mtp_drafter.h"

#include <algorithm>

#include "base/error.h"

namespace duet::engine {

MtpDrafter::MtpDrafter(model::Model& model, int64_t pages) : model_(model), storage_(model.new_mtp_storage(pages)) {}

std::vector<std::vector<int32_t>> MtpDrafter::run(std::span<const Rows> rows) {
  const auto h = static_cast<size_t>(model_.config().hidden_size);
  std::vector<std::vector<int32_t>> drafts(rows.size());
  if (rows.empty()) return drafts;
  std::vector<model::MtpPiece> pieces;
  for (const Rows& r : rows)
    pieces.push_back(
        {.page_table = r.page_table,
         .position = r.position,
         .hidden = r.hidden,
         .tokens = r.tokens,
         .wants = r.drafts > 0 ? model::RowOutput::sampled | model::RowOutput::norm_rows : model::RowOutput::none,
         .role = backend::RowRole::decode});
  std::vector<model::MtpResult> results = model_.mtp_forward(*storage_, pieces);
  // Each drafting entry's last row so far: its row after mtp.norm (the next draft row's hidden input) and its draft.
  std::vector<std::vector<float>> hidden(rows.size());
  std::vector<int32_t> last(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].drafts == 0) continue;
    drafts[i].push_back(results[i].sampled);
    hidden[i].assign(results[i].norm_rows.end() - static_cast<std::ptrdiff_t>(h), results[i].norm_rows.end());
  }
  const int32_t most = std::max_element(rows.begin(), rows.end(), [](const Rows& a, const Rows& b) {
                         return a.drafts < b.drafts;
                       })->drafts;
  for (int32_t k = 1; k < most; ++k) {  // draft k + 1 of every entry that wants that many, one MTP step
    std::vector<size_t> of;
    pieces.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].drafts <= k) continue;
      last[i] = drafts[i].back();
      of.push_back(i);
      pieces.push_back({.page_table = rows[i].page_table,
                        .position = rows[i].position + static_cast<int32_t>(rows[i].tokens.size()) + k - 1,
                        .hidden = hidden[i],
                        .tokens = std::span(&last[i], 1),
                        .wants = model::RowOutput::sampled | model::RowOutput::norm_rows,
                        .role = backend::RowRole::decode});
    }
    results = model_.mtp_forward(*storage_, pieces);
    for (size_t n = 0; n < of.size(); ++n) {
      drafts[of[n]].push_back(results[n].sampled);
      hidden[of[n]] = std::move(results[n].norm_rows);
    }
  }
  return drafts;
}

}  // namespace duet::engine
