#include "server/route_table.h"

#include <set>

namespace duet::server {
namespace {

const char* method_name(RouteTable::Method method) {
  switch (method) {
    case RouteTable::Method::get:
      return "GET";
    case RouteTable::Method::post:
      return "POST";
    case RouteTable::Method::del:
      return "DELETE";
  }
  return "";
}

}  // namespace

void RouteTable::add(Method method, std::string path, Handler handler, bool needs_key) {
  routes_.push_back(Route{method, std::move(path), std::move(handler), needs_key});
}

void RouteTable::add_prefix(Method method, std::string prefix, Handler handler) {
  routes_.push_back(Route{method, std::move(prefix), std::move(handler), true, true});
}

RouteTable::Match RouteTable::match(std::string_view method, std::string_view path) const {
  std::string_view wanted = method == "HEAD" ? "GET" : method;
  std::set<std::string> allowed;
  for (const Route& route : routes_) {
    const bool under = route.prefix && path.size() > route.path.size() && path.starts_with(route.path);
    if (route.path != path && !under) continue;
    if (wanted == method_name(route.method)) return Match{&route, {}};
    allowed.insert(method_name(route.method));
    if (route.method == Method::get) allowed.insert("HEAD");
  }
  std::string list;
  for (const auto& name : allowed) list += (list.empty() ? "" : ", ") + name;
  return Match{nullptr, list};
}

bool RouteTable::needs_key(std::string_view path) const {
  for (const Route& route : routes_)
    if (route.path == path && !route.needs_key) return false;
  return true;
}

}  // namespace duet::server
