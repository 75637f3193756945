#pragma once
// Request fields a route does not know. OpenAI adds fields with every API version and clients send fields of other
// servers, so an unknown field is ignored rather than refused; it is named back to the client (a response header)
// and to the operator (one warning log line per request), so what had no effect is never silent. A known field of
// the wrong type is still refused by name: only names the route does not know at all are ignored.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_types.h"

namespace duet::server {

inline constexpr std::string_view kIgnoredFieldsHeader = "X-Duet-Ignored-Fields";

class IgnoredFields {
 public:
  // `path` as the client would name it in an error's `param`: "x", "messages[0].x", "stream_options.x".
  void add(std::string path);
  bool empty() const { return count_ == 0; }
  size_t count() const { return count_; }
  const std::vector<std::string>& paths() const { return paths_; }  // the first kMaxNamed
  // "a, messages[0].b": the names in the order met, bytes outside visible ASCII and ',' '%' as %XX (a name is the
  // client's text and must neither break the header nor fake a second name), "... (N more)" past kMaxNamed.
  std::string list() const;

  // A body may hold thousands of unknown keys; the header and the log line name the first ones and count the rest.
  static constexpr size_t kMaxNamed = 32;
  static constexpr size_t kMaxNameBytes = 100;

 private:
  std::vector<std::string> paths_;
  size_t count_ = 0;
};

// For a request that sent unknown fields: logs one warning line naming them and the route, and returns the header
// that names them in the answer (nothing when there were none).
HttpHeaders report_ignored_fields(const IgnoredFields& ignored, std::string_view route);

}  // namespace duet::server
