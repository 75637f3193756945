#pragma once
// Stored responses: the Responses API's `store: true` (its default). Each response is kept with the input items it
// was made from (earlier turns included), in memory only, under the API key that made it: a lookup by another key
// finds nothing, as if the id did not exist. Bounded by bytes (--responses-store-mib) and age (--responses-ttl),
// evicted least recently used. Ids are only compared, never used to open anything. Thread-safe.
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace duet::server {

struct StoredResponse {
  nlohmann::ordered_json response;                                 // the response object as it was answered
  nlohmann::ordered_json input = nlohmann::ordered_json::array();  // its input items, each with an id
};

class ResponseStore {
 public:
  struct Limits {
    size_t max_bytes = size_t{64} << 20;
    std::chrono::seconds ttl{3600};
  };
  using Clock = std::chrono::steady_clock;

  void set_limits(Limits limits);
  // Keeps `stored` under (owner, its response's id), evicting the least recently used past the limits. A response
  // larger than the whole store is not kept.
  void put(const std::string& owner, StoredResponse stored);
  std::optional<StoredResponse> get(const std::string& owner, const std::string& id);
  // An input or output item of one of the owner's stored responses, by its id (what `item_reference` names).
  std::optional<nlohmann::ordered_json> item(const std::string& owner, const std::string& item_id);
  bool erase(const std::string& owner, const std::string& id);
  size_t bytes() const;

  // For tests: the time the store sees.
  void set_clock(std::function<Clock::time_point()> now) { now_ = std::move(now); }

 private:
  struct Entry {
    std::string key;  // owner + '\n' + response id
    std::string owner;
    StoredResponse stored;
    size_t bytes = 0;
    Clock::time_point created;
  };
  using Entries = std::list<Entry>;  // most recently used first

  void drop(Entries::iterator it);
  void drop_expired_and_excess();
  Entries::iterator find(const std::string& owner, const std::string& id);

  mutable std::mutex mutex_;
  Limits limits_;
  Entries entries_;
  std::unordered_map<std::string, Entries::iterator> by_key_;
  std::unordered_map<std::string, std::string> item_to_key_;  // owner + '\n' + item id -> the response's key
  size_t bytes_ = 0;
  std::function<Clock::time_point()> now_ = [] { return Clock::now(); };
};

}  // namespace duet::server
