#pragma once
// What stored state means for one POST /v1/responses: `store` (default true, as OpenAI's), `previous_response_id`
// (the earlier response's input and output items come before this input; its instructions do not carry over, as
// OpenAI documents) and `item_reference` inputs (an item of one of the same key's stored responses). All of it is
// resolved before the body is read as a conversation, so the prompt is built from plain items.
#include <string>

#include "server/request_parsing.h"
#include "server/response_store.h"

namespace duet::server {

struct ResponsesState {
  bool store = true;
  std::string previous_response_id;  // empty: none
  // The whole conversation's items (earlier turns, then this input, references resolved), each with an id: what a
  // stored response keeps as its input, and what `input` becomes.
  Json items = Json::array();
};

// Reads the state fields of `body` for `owner` (api_keys.h: key_owner) and returns the body with `input` replaced by
// the whole conversation's items and the state fields removed. Unknown ids: 404 `previous_response_not_found`
// (param previous_response_id) or 404 `item_not_found` (param input[i].id).
Json resolve_responses_state(const Json& body, ResponseStore& store, const std::string& owner, ResponsesState& state);

}  // namespace duet::server
