#pragma once
// A server-sent-event stream split into its `data:` payloads as the bytes arrive, for `duet bench`'s streamed
// requests (keep-alive comments and other fields are skipped).
#include <cstddef>
#include <string>
#include <string_view>

namespace duet::cli {

class SseEvents {
 public:
  // Calls on_data(payload) for each complete event in what has come so far; stops, returning false, when it does.
  template <typename OnData>
  bool feed(const char* data, size_t size, OnData&& on_data) {
    pending_.append(data, size);
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      const std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (!std::string_view(event).starts_with("data: ")) continue;
      if (!on_data(event.substr(6))) return false;
    }
    return true;
  }

 private:
  std::string pending_;
};

}  // namespace duet::cli
