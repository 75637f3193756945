#include "server/chat_prompt.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "server/errors.h"
#include "server/prompt_images.h"
#include "server/turn_start_hints.h"

namespace duet::server {
namespace {

// The tokens that end a chat turn, besides the tokenizer's eos (a base model's eos is <|endoftext|>).
std::vector<int32_t> end_of_turn_ids(const tokenizer::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const char* token : {"<|im_end|>", "<|endoftext|>"})
    if (auto id = tokenizer.token_to_id(token)) ids.push_back(*id);
  return ids;
}

// Before anything is rendered: a server that reads no images refuses the first image part, naming why.
void refuse_unreadable_images(const ServerContext& context, const std::vector<ImagePart>& images) {
  if (!images.empty() && !context.vision)
    throw ApiError(400, fmt::format("{}: {}: image parts cannot be read", images[0].param, context.no_vision),
                   images[0].param, "images_not_supported");
}

}  // namespace

std::shared_ptr<const std::vector<engine::PromptImage>> prompt_images(const ServerContext& context,
                                                                      const std::vector<ImagePart>& images,
                                                                      std::vector<int32_t>& prompt,
                                                                      const std::string& param) {
  refuse_unreadable_images(context, images);
  if (!context.vision) return nullptr;
  return expand_prompt_images(*context.vision, images, prompt, param, context.options.context);
}

ChatPrompt build_chat_prompt(const ServerContext& context, const std::vector<tokenizer::ChatMessage>& messages,
                             const Json& tools, bool enable_thinking, const SamplingRequest& sampling,
                             const std::string& param, const std::string& answer_start,
                             const std::vector<ImagePart>& images) {
  refuse_unreadable_images(context, images);
  std::string prompt;
  try {
    tokenizer::ChatOptions chat_options;
    chat_options.tools = tools;
    chat_options.enable_thinking = enable_thinking;
    prompt = context.render_chat(messages, chat_options);
  } catch (const duet::Error& error) {
    throw ApiError(400, error.what(), param, "invalid_messages");
  }
  ChatPrompt out;
  out.starts_in_reasoning = prompt.ends_with("<think>\n") || prompt.ends_with("<think>");
  out.answer_start = answer_start;
  out.request.prompt = context.tokenizer.encode(prompt + answer_start);
  // The prompt cache also keeps the state where the generation prompt starts, where the last user turn starts and
  // where the leading system turn ends (engine/request.h says who repeats what), read off the ids while each image is
  // still one <|image_pad|> as in the text; then each image before a point moves it by its run of image tokens.
  out.request.cache_hints = turn_start_hints(context.tokenizer, prompt, out.request.prompt);
  std::vector<size_t> images_before(out.request.cache_hints.size(), 0);
  if (!images.empty() && context.vision)
    for (size_t h = 0; h < images_before.size(); ++h)
      images_before[h] = static_cast<size_t>(std::count(out.request.prompt.begin(),
                                                        out.request.prompt.begin() + out.request.cache_hints[h],
                                                        context.vision->image_token_id));
  out.request.images = prompt_images(context, images, out.request.prompt, param);
  if (out.request.images) {
    const auto merge = static_cast<int32_t>(context.vision->processor.layout.merge);
    for (size_t h = 0; h < images_before.size(); ++h)
      for (size_t i = 0; i < images_before[h] && i < out.request.images->size(); ++i) {
        const engine::PromptImage& image = (*out.request.images)[i];
        out.request.cache_hints[h] += image.t * image.h * image.w / (merge * merge) - 1;
      }
  }
  out.request.sampling = sampling.params;
  if (!out.request.sampling.ignore_eos)
    for (int32_t id : end_of_turn_ids(context.tokenizer)) out.request.sampling.stop_token_ids.push_back(id);
  out.request.sampling.max_tokens =
      resolve_max_tokens(sampling.max_tokens, static_cast<int32_t>(out.request.prompt.size()),
                         context.options.max_tokens, context.options.context, param);
  return out;
}

}  // namespace duet::server
