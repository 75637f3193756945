#include "cli/mtp_agreement.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "engine/piece_runner.h"

namespace duet::cli {

MtpAgreement mtp_agreement(model::Model& model, std::span<const int32_t> sequence, size_t first_generated) {
  if (!model.has_mtp()) fail("--mtp-agreement: the model has no MTP layer (no mtp.* tensors, or none declared)");
  MtpAgreement result;
  if (first_generated < 1 || sequence.size() < first_generated + 2) return result;  // nothing a draft could predict
  const auto length = static_cast<int32_t>(sequence.size());
  engine::PieceRunner runner(model, 1, length);
  const auto main =
      runner.run(model::Piece{.slot = runner.open(), .tokens = sequence, .wants = model::RowOutput::norm_rows});
  const int64_t pages = (length + model.kv_page_positions() - 1) / model.kv_page_positions();
  auto storage = model.new_mtp_storage(pages);
  std::vector<int32_t> page_table(static_cast<size_t>(pages));
  for (int32_t i = 0; i < static_cast<int32_t>(pages); ++i) page_table[static_cast<size_t>(i)] = i;
  const size_t rows = sequence.size() - 1;  // MTP rows 0..T-2: row j reads token j + 1
  const auto h = static_cast<size_t>(model.config().hidden_size), V = static_cast<size_t>(model.config().vocab_size);
  const model::MtpPiece piece{.page_table = page_table,
                              .hidden = std::span(main[0].norm_rows).first(rows * h),
                              .tokens = sequence.subspan(1),
                              .wants = model::RowOutput::all_logits};
  const auto mtp = model.mtp_forward(*storage, std::span(&piece, 1));
  for (size_t j = first_generated - 1; j + 2 < sequence.size(); ++j) {
    const auto logits = std::span(mtp[0].logits).subspan(j * V, V);
    const auto drafted = std::max_element(logits.begin(), logits.end()) - logits.begin();
    result.agreed += drafted == sequence[j + 2];
    ++result.rows;
  }
  return result;
}

}  // namespace duet::cli
