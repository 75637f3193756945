// POST /v1/systemone: System One decisions (../shared/spec/systemone.md). The route only reads the body and writes
// the answer; answer_decision (decisions.cc) does the rest.
#include <httplib.h>

#include "server/decisions.h"
#include "server/http_server.h"

namespace duet::server {

void add_systemone_route(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/v1/systemone", [&context](const httplib::Request& req, httplib::Response& res) {
    const std::string answer = answer_decision(context, parse_decision_request_body(req.body));
    res.status = 200;
    res.set_content(answer, "application/json");
  });
}

}  // namespace duet::server
