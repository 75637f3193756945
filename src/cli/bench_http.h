#pragma once
// The HTTP side `duet bench` shares between its chat and decision runs: a keep-alive connection to the server with
// the bench's timeouts, and the API key header.
#include <httplib.h>

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"

namespace duet::cli {

struct BenchServer {
  std::string url;
  std::string api_key;
  double timeout_s = 600;

  std::unique_ptr<httplib::Client> connect() const {
    auto client = std::make_unique<httplib::Client>(url);
    if (!client->is_valid()) fail("--url {}: not a URL httplib can use (http://HOST:PORT)", url);
    client->set_connection_timeout(10);
    client->set_read_timeout(static_cast<time_t>(timeout_s));
    client->set_keep_alive(true);
    client->set_tcp_nodelay(true);  // a request's headers and body are separate writes: no Nagle delay
    return client;
  }

  httplib::Headers headers() const {
    httplib::Headers headers;
    if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
    return headers;
  }
};

// "1,4,16" -> {1, 4, 16}; refuses anything but positive integers, naming `flag`.
inline std::vector<int> parse_positive_list(const std::string& text, const char* flag) {
  std::vector<int> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      size_t used = 0;
      const int value = std::stoi(item, &used);
      if (used != item.size() || value < 1) throw std::invalid_argument(item);
      values.push_back(value);
    } catch (const std::exception&) {
      fail("{} {}: `{}` is not a positive integer", flag, text, item);
    }
  }
  if (values.empty()) fail("{}: give at least one value", flag);
  return values;
}

struct DecisionBenchOptions {
  BenchServer server;
  std::string model;                            // empty: the server's own, from /v1/models
  std::string lengths = "500,2000,6000,12000";  // target prompt lengths in tokens
  int concurrency = 4;
  int reps = 2;  // requests each concurrent stream sends: a length runs concurrency x reps distinct decisions
  bool same_state = false;  // one state a length, 1 + concurrency x reps decisions about it, one at a time
};

// `duet bench --decisions`; returns the exit code (non-zero when any decision failed or differed).
int bench_decisions(const DecisionBenchOptions& options);

struct MultiTurnOptions {
  BenchServer server;
  std::string model;         // empty: the server's own, from /v1/models
  int turns = 4;             // user turns, each a request with the whole conversation so far
  int system_tokens = 2000;  // the system prompt's length (at least), by the server's tokenizer
  int reply_tokens = 32;     // max_tokens of each reply
  int conversations = 1;     // conversations taking turns (each its own system prompt)
};

// `duet bench --multi-turn`; returns the exit code (non-zero when a turn failed).
int bench_multi_turn(const MultiTurnOptions& options);

}  // namespace duet::cli
