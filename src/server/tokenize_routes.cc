// POST /tokenize (text, or chat messages through the template) and POST /detokenize: the server's own
// tokenizer, so clients can count and build token-id prompts exactly as the server will. Chat messages may hold
// image_url parts: each is decoded and its <|image_pad|> repeated once per image token, through the very path chat
// takes (chat_prompt.h's prompt_images), so the count is chat's prompt_tokens and the refusals are chat's.
#include <fmt/format.h>

#include <limits>

#include "base/error.h"
#include "base/exact_json.h"
#include "server/chat_prompt.h"
#include "server/chat_request.h"
#include "server/errors.h"
#include "server/request_parsing.h"
#include "server/route_table.h"

namespace duet::server {

void add_tokenize_routes(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/tokenize", [&context](const HttpRequest& req) {
    Json body = request_json(req);
    IgnoredFields ignored;
    check_known_fields(body, {"model", "prompt", "messages", "tools", "chat_template_kwargs", "add_generation_prompt"},
                       {}, {}, ignored);
    check_model(body, context.options.served_model_name);
    bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
    bool has_messages = body.contains("messages") && !body["messages"].is_null();
    if (has_prompt == has_messages) refuse_field("prompt", "send exactly one of prompt and messages");
    std::string text;
    std::vector<ImagePart> images;
    if (has_prompt) {
      for (const char* chat_only : {"tools", "chat_template_kwargs", "add_generation_prompt"})
        if (body.contains(chat_only)) refuse_field(chat_only, "only with messages");
      text = *read_string(body, "prompt", "prompt");
    } else {
      auto messages = parse_chat_messages(body, ignored, &images);
      tokenizer::ChatOptions options;
      options.tools = parse_tools(body);
      options.enable_thinking = parse_enable_thinking(body, context.options.enable_thinking, ignored);
      options.add_generation_prompt = read_bool(body, "add_generation_prompt", "add_generation_prompt").value_or(true);
      try {
        text = context.render_chat(messages, options);
      } catch (const duet::Error& error) {
        throw ApiError(400, error.what(), "messages", "invalid_messages");
      }
    }
    std::vector<int32_t> ids = context.tokenizer.encode(text);
    prompt_images(context, images, ids, "messages");
    HttpResponse res =
        json_response({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", context.options.context}});
    res.headers = report_ignored_fields(ignored, "/tokenize");
    return res;
  });

  table.add(RouteTable::Method::post, "/detokenize", [&context](const HttpRequest& req) {
    Json body = request_json(req);
    IgnoredFields ignored;
    check_known_fields(body, {"model", "tokens"}, {}, {}, ignored);
    check_model(body, context.options.served_model_name);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) refuse_field("tokens", "expected an array of token ids");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& id = (*it)[i];
      std::string name = fmt::format("tokens[{}]", i);
      if (exact_integer_text(id)) refuse_field(name, "not a token id");  // beyond 64 bits
      if (!id.is_number_integer()) refuse_field(name, "expected a token id (an integer)");
      if (id.is_number_unsigned() ? id.get<uint64_t>() >= uint64_t(context.tokenizer.vocab_size())
                                  : id.get<int64_t>() < 0)
        refuse_field(name,
                     fmt::format("not a token id of this tokenizer (0 to {})", context.tokenizer.vocab_size() - 1));
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    std::string text;
    try {
      text = context.tokenizer.decode(ids, false);
    } catch (const duet::Error& error) {
      throw ApiError(400, error.what(), "tokens", "invalid_value");
    }
    HttpResponse res = json_response({{"prompt", text}});
    res.headers = report_ignored_fields(ignored, "/detokenize");
    return res;
  });
}

}  // namespace duet::server
