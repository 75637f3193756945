#pragma once
// The checks submit() makes before a request may wait for a slot. The server validates its JSON first; these
// protect the engine's own invariants (ids in range, room in the context, sane sampling numbers) for any caller.
#include <cstdint>

#include "engine/request.h"

namespace duet::engine {

struct RequestLimits {
  int32_t vocab_size = 0;
  int32_t context = 0;
  int64_t kv_pages = 0;  // the whole KV cache; 0: not checked
  int32_t kv_page_positions = 64;
  bool has_tokenizer = false;  // stop strings need one
  bool has_adapter = false;    // AdapterUse::clef needs one
  // Images (Request::images): the model's image token and its merge (0: images are refused), and the values of one
  // patch row of pixel_values.
  int32_t image_token_id = -1;
  int32_t image_merge = 0;
  int64_t image_patch_row = 0;
};

// Throws RequestInvalid with code "invalid_prompt" (empty, or an id outside [0, vocab)),
// "context_length_exceeded" (prompt + max_tokens > context, or more KV pages than the whole cache holds; a decide
// request counts its prompt only), "invalid_sampling" (a number out of range, or stop strings without a tokenizer;
// not checked for decide requests), "invalid_decision" (a decide request without a sink) or "invalid_adapter" (the
// runtime adapter asked of a model without one) or "invalid_images" (images for an engine without a vision tower, or
// images whose grids, pixel values and runs of image tokens do not agree with each other and with the prompt).
void validate_request(const Request& request, const RequestLimits& limits);

}  // namespace duet::engine
