#pragma once
// Server-side counters for GET /metrics (HTTP responses by route and status, finish reasons, latency), rendered
// together with the engine's own stats in Prometheus' text format.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "engine/engine.h"
#include "engine/request.h"

namespace duet::grammar {
class GrammarCache;
}

namespace duet::server {

class ServerMetrics {
 public:
  // `route` is one of the server's own route names (never a client's path), so labels stay bounded.
  void count_response(std::string_view route, int status);
  void record_finished(const engine::FinishedEvent& finished, double request_seconds);
  // Connections: accepted ones open and close; `refused` ones were over --max-connections (answered 503).
  void connection_opened();
  void connection_closed();
  void connection_refused();
  std::string render(const engine::EngineStats& engine, const std::string& model_name) const;

  // Structured outputs: requests bound to a grammar, and the cache their grammars came from (hits and compiles).
  std::atomic<int64_t> constrained_requests{0};
  const grammar::GrammarCache* grammar_cache = nullptr;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> responses_;
  std::map<std::string, int64_t> finish_reasons_;
  double ttft_seconds_sum_ = 0;
  int64_t ttft_count_ = 0;
  double request_seconds_sum_ = 0;
  int64_t request_count_ = 0;
  int64_t connections_open_ = 0;
  int64_t connections_total_ = 0;
  int64_t connections_refused_ = 0;
};

}  // namespace duet::server
