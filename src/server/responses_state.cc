#include "server/responses_state.h"

#include <fmt/format.h>

#include "server/errors.h"
#include "server/ids.h"

namespace duet::server {
namespace {

// An input item as it is stored and listed (GET .../input_items): with an id, for item_reference (a client's own id
// is kept), and a message's string content as the one text part OpenAI lists it as.
Json stored_item(Json item) {
  const bool message = !item.contains("type") || item["type"] == "message";
  if (!item.contains("id") || !item["id"].is_string()) item["id"] = random_id(message ? "msg_" : "item_");
  if (message && item.contains("content") && item["content"].is_string()) {
    const bool assistant = item.value("role", Json()) == "assistant";
    Json part = {{"type", assistant ? "output_text" : "input_text"}, {"text", item["content"]}};
    if (assistant) part["annotations"] = Json::array();
    item["content"] = Json::array({std::move(part)});
  }
  if (message && !item.contains("type")) item["type"] = "message";
  return item;
}

}  // namespace

Json resolve_responses_state(const Json& body, ResponseStore& store, const std::string& owner, ResponsesState& state) {
  state.store = read_bool(body, "store", "store").value_or(true);
  if (auto previous = read_string(body, "previous_response_id", "previous_response_id")) {
    auto stored = store.get(owner, *previous);
    if (!stored)
      throw ApiError(404,
                     fmt::format("Previous response with id '{}' not found (never stored, deleted, expired or made "
                                 "with another key)",
                                 previous->substr(0, 128)),
                     "previous_response_id", "previous_response_not_found");
    state.previous_response_id = *previous;
    for (const auto& item : stored->input) state.items.push_back(item);
    for (const auto& item : stored->response["output"]) state.items.push_back(item);
  }
  auto input = body.find("input");
  if (input != body.end() && input->is_string()) {
    state.items.push_back(stored_item({{"type", "message"}, {"role", "user"}, {"content", *input}}));
  } else if (input != body.end() && input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& item = (*input)[i];
      if (!item.is_object() || item.value("type", Json()) != "item_reference") {
        state.items.push_back(item.is_object() ? stored_item(item) : item);  // the parser refuses what is not an item
        continue;
      }
      const std::string param = fmt::format("input[{}].id", i);
      auto id = read_string(item, "id", param);
      if (!id) refuse_field(param, "missing");
      auto found = store.item(owner, *id);
      if (!found)
        throw ApiError(404,
                       fmt::format("Item with id '{}' not found in this key's stored responses", id->substr(0, 128)),
                       param, "item_not_found");
      state.items.push_back(std::move(*found));
    }
  }
  Json resolved = body;
  if (input != body.end() && !input->is_null()) resolved["input"] = state.items;  // else the parser names it missing
  resolved.erase("previous_response_id");
  resolved.erase("store");
  return resolved;
}

}  // namespace duet::server
