// The routes of stored responses (response_store.h), each answering only for the key that made the response:
// GET /v1/responses/{id}, GET /v1/responses/{id}/input_items, DELETE /v1/responses/{id} and
// POST /v1/responses/{id}/cancel. The id is compared, never used for anything else. An id that is unknown, deleted,
// expired or another key's is 404 in OpenAI's shape.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "server/api_keys.h"
#include "server/request_parsing.h"
#include "server/route_table.h"

namespace duet::server {
namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kPrefix = "/v1/responses/";

struct Target {
  std::string id;
  std::string action;  // "", "input_items" or "cancel"
};

Target target_of(const HttpRequest& req) {
  std::string_view rest = std::string_view(req.path).substr(kPrefix.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return {std::string(rest), ""};
  return {std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1))};
}

// Keeping the key order the response was answered with.
HttpResponse ordered_response(const OJson& body) {
  HttpResponse res;
  res.body = json_text(body);
  return res;
}

[[noreturn]] void not_found(const std::string& id) {
  throw ApiError(404, fmt::format("Response with id '{}' not found.", id.substr(0, 128)), "", "response_not_found");
}

[[noreturn]] void no_such_route() {
  throw ApiError(404, "no such route; see docs/api.md for the routes duet serves", "", "not_found");
}

// One query parameter's value (`name=value`), percent-decoding not needed for the values read here.
std::optional<std::string> query_value(const HttpRequest& req, std::string_view name) {
  const size_t question = req.target.find('?');
  if (question == std::string::npos) return std::nullopt;
  std::string_view query = std::string_view(req.target).substr(question + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    if (pair.starts_with(name) && pair.size() > name.size() && pair[name.size()] == '=')
      return std::string(pair.substr(name.size() + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// OpenAI's list page: `order` asc or desc (the default), `after` an item id, `limit` 1..100 (default 20).
OJson input_items_page(const HttpRequest& req, const OJson& items) {
  const std::string order = query_value(req, "order").value_or("desc");
  if (order != "asc" && order != "desc") refuse_field("order", "expected asc or desc");
  int limit = 20;
  if (auto text = query_value(req, "limit")) {
    char* end = nullptr;
    const long value = std::strtol(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || value < 1 || value > 100) refuse_field("limit", "expected 1 to 100");
    limit = static_cast<int>(value);
  }
  std::vector<OJson> ordered(items.begin(), items.end());
  if (order == "desc") std::reverse(ordered.begin(), ordered.end());
  size_t start = 0;
  if (auto after = query_value(req, "after")) {
    while (start < ordered.size() && ordered[start].value("id", std::string()) != *after) ++start;
    if (start == ordered.size()) refuse_field("after", "no such item in this response's input");
    ++start;
  }
  OJson data = OJson::array();
  for (size_t i = start; i < ordered.size() && data.size() < static_cast<size_t>(limit); ++i)
    data.push_back(ordered[i]);
  const bool more = start + data.size() < ordered.size();
  return {{"object", "list"},
          {"data", data},
          {"first_id", data.empty() ? OJson(nullptr) : data.front()["id"]},
          {"last_id", data.empty() ? OJson(nullptr) : data.back()["id"]},
          {"has_more", more}};
}

}  // namespace

void add_stored_responses_routes(RouteTable& table, ServerContext& context) {
  table.add_prefix(RouteTable::Method::get, std::string(kPrefix), [&context](const HttpRequest& req) {
    const Target target = target_of(req);
    if (!target.action.empty() && target.action != "input_items") no_such_route();
    auto stored = context.responses.get(key_owner(req.header("Authorization")), target.id);
    if (!stored) not_found(target.id);
    return ordered_response(target.action.empty() ? stored->response : input_items_page(req, stored->input));
  });
  table.add_prefix(RouteTable::Method::del, std::string(kPrefix), [&context](const HttpRequest& req) {
    const Target target = target_of(req);
    if (!target.action.empty()) no_such_route();
    if (!context.responses.erase(key_owner(req.header("Authorization")), target.id)) not_found(target.id);
    return ordered_response(OJson{{"id", target.id}, {"object", "response.deleted"}, {"deleted", true}});
  });
  // Only background responses can be cancelled, and duet answers every response in the foreground.
  table.add_prefix(RouteTable::Method::post, std::string(kPrefix), [&context](const HttpRequest& req) -> HttpResponse {
    const Target target = target_of(req);
    if (target.action != "cancel") no_such_route();
    if (!context.responses.get(key_owner(req.header("Authorization")), target.id)) not_found(target.id);
    throw ApiError(400, "Only background responses can be cancelled; duet answers every response in the foreground", "",
                   "not_background");
  });
}

}  // namespace duet::server
