#include "server/chat_prompt.h"

#include "base/error.h"
#include "server/errors.h"

namespace duet::server {
namespace {

// The tokens that end a chat turn, besides the tokenizer's eos (a base model's eos is <|endoftext|>).
std::vector<int32_t> end_of_turn_ids(const tokenizer::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const char* token : {"<|im_end|>", "<|endoftext|>"})
    if (auto id = tokenizer.token_to_id(token)) ids.push_back(*id);
  return ids;
}

}  // namespace

ChatPrompt build_chat_prompt(const ServerContext& context, const std::vector<tokenizer::ChatMessage>& messages,
                             const Json& tools, bool enable_thinking, const SamplingRequest& sampling,
                             const std::string& param, const std::string& answer_start) {
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
  // The prompt cache keeps the state where the generation prompt starts (its `<|im_start|>` is a special token, so the
  // text before it tokenizes as the prompt's own beginning): the next turn repeats everything before it.
  if (const size_t header = prompt.rfind("<|im_start|>"); header != std::string::npos && header > 0)
    out.request.cache_hint = static_cast<int32_t>(context.tokenizer.encode(prompt.substr(0, header)).size());
  out.request.sampling = sampling.params;
  if (!out.request.sampling.ignore_eos)
    for (int32_t id : end_of_turn_ids(context.tokenizer)) out.request.sampling.stop_token_ids.push_back(id);
  out.request.sampling.max_tokens =
      resolve_max_tokens(sampling.max_tokens, static_cast<int32_t>(out.request.prompt.size()),
                         context.options.max_tokens, context.options.context, param);
  return out;
}

}  // namespace duet::server
