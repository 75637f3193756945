#pragma once
// From a conversation to an engine request, as the chat-like routes (chat/completions, responses, messages) build it:
// the chat template rendered, tokenized, its images decoded, generation stopped at the end-of-turn tokens, the budget
// fitted to the context.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/image_parts.h"
#include "server/request_parsing.h"
#include "server/server_context.h"
#include "tokenizer/chat_template.h"

namespace duet::server {

struct ChatPrompt {
  engine::Request request;
  // The template's generation prompt opened <think> (thinking on): the reply starts inside the reasoning.
  bool starts_in_reasoning = false;
  // What the prompt wrote at the start of the answer (a forced tool call, tool_choice.h): the reply's parser reads it
  // first, as if the model had written it.
  std::string answer_start;
};

// `param` names the field a refusal points at (`messages`, `input`). `answer_start` follows the template's generation
// prompt. `images` are the messages' image parts in order (their markup already in the content): decoded and expanded
// (server/prompt_images.h) when the server reads images, else refused naming the first. Throws ApiError 400
// invalid_messages when the template cannot render the conversation, context_length_exceeded when the prompt fills the
// context, and the refusals of expand_prompt_images.
// The prompt's images for engine::Request::images (null without images): decoded, and their tokens expanded in
// `prompt`, by expand_prompt_images (prompt_images.h) when the server reads images; on a server that does not, an
// image part is refused (400 images_not_supported naming the first part and why). Every route that takes images
// (chat/completions, responses, messages and its count_tokens) goes through here.
std::shared_ptr<const std::vector<engine::PromptImage>> prompt_images(const ServerContext& context,
                                                                      const std::vector<ImagePart>& images,
                                                                      std::vector<int32_t>& prompt,
                                                                      const std::string& param);

ChatPrompt build_chat_prompt(const ServerContext& context, const std::vector<tokenizer::ChatMessage>& messages,
                             const Json& tools, bool enable_thinking, const SamplingRequest& sampling,
                             const std::string& param, const std::string& answer_start = {},
                             const std::vector<ImagePart>& images = {});

}  // namespace duet::server
