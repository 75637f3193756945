// POST /v1/systemone: System One decisions (../shared/spec/systemone.md). The route only reads the body;
// answer_decision (decisions.cc) does the rest, and the answer goes out when the engine has made the decision.
#include "server/decisions.h"
#include "server/route_table.h"

namespace duet::server {

void add_systemone_route(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/v1/systemone", [&context](const HttpRequest& req) {
    return answer_decision(context, parse_decision_request_body(req.body));
  });
}

}  // namespace duet::server
