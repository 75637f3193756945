// GET /: a small chat and decisions page for a browser (src/server/web/index.html, compiled in), off with --no-ui.
// It needs no key (a browser cannot send one when it opens a page); the page asks for the key and sends it on its own
// requests, which are checked as any other. Its Content-Security-Policy lets it talk to this origin only, and show
// images only from data: URLs (the thumbnails of the images it sends).
#include <string_view>

#include "server/route_table.h"

namespace duet::server {

extern const std::string_view kWebPage;

void add_web_ui_route(RouteTable& table, ServerContext& context) {
  if (!context.options.web_ui) return;
  table.add(
      RouteTable::Method::get, "/",
      [](const HttpRequest&) {
        HttpResponse res;
        res.content_type = "text/html; charset=utf-8";
        res.body = std::string(kWebPage);
        res.headers.emplace_back(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
        res.headers.emplace_back("X-Content-Type-Options", "nosniff");
        return res;
      },
      /*needs_key=*/false);
}

}  // namespace duet::server
