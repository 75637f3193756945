#pragma once
// The connections open now, so the server can count them against --max-connections (in all, and per client
// address against --max-connections-per-client), close the one idle the longest when it needs room, and reach each
// one when it stops. A connection adds itself when accepted and removes itself when destroyed (on any thread).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace duet::server {

// Connection must have `int64_t idle_since() const` (0 while busy) and `bool evict(int64_t idle_since)` (closes it
// if it is still idle since then).
template <typename Connection>
class ConnectionRegistry {
 public:
  struct Count {
    size_t open;         // connections open, this one included
    size_t from_client;  // of them from this one's address
  };

  Count add(const std::shared_ptr<Connection>& connection, const std::string& client) {
    std::lock_guard lock(mutex_);
    connections_[connection.get()] = Entry{connection, client};
    return {connections_.size(), ++per_client_[client]};
  }
  void remove(const Connection* connection) {
    std::function<void()> on_empty;
    {
      std::lock_guard lock(mutex_);
      auto it = connections_.find(connection);
      if (it == connections_.end()) return;
      if (auto client = per_client_.find(it->second.client); client != per_client_.end() && --client->second == 0)
        per_client_.erase(client);
      connections_.erase(it);
      if (connections_.empty()) on_empty = on_empty_;
    }
    if (on_empty) on_empty();
  }
  size_t size() const {
    std::lock_guard lock(mutex_);
    return connections_.size();
  }
  // Closes the connection idle the longest (waiting for a request, none in progress); false when none is idle.
  // One scan of the open connections: it runs only when the server is full.
  bool evict_oldest_idle() {
    for (int attempt = 0; attempt < 4; ++attempt) {  // a connection may get busy between the scan and evict()
      std::shared_ptr<Connection> oldest;
      int64_t oldest_since = 0;
      {
        std::lock_guard lock(mutex_);
        const Connection* pick = nullptr;
        for (const auto& [key, entry] : connections_) {
          const int64_t since = key->idle_since();  // alive: its destructor waits for this lock to remove it
          if (since != 0 && (pick == nullptr || since < oldest_since)) {
            pick = key;
            oldest_since = since;
          }
        }
        if (pick == nullptr) return false;
        oldest = connections_.at(pick).connection.lock();
      }
      if (oldest && oldest->evict(oldest_since)) return true;
    }
    return false;
  }
  // Calls `visit` (outside the lock) for every connection still alive.
  void for_each(const std::function<void(const std::shared_ptr<Connection>&)>& visit) const {
    std::vector<std::shared_ptr<Connection>> alive;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [key, entry] : connections_)
        if (auto connection = entry.connection.lock()) alive.push_back(std::move(connection));
    }
    for (const auto& connection : alive) visit(connection);
  }
  // Called whenever the last connection goes (null: nothing). It must not block.
  void on_empty(std::function<void()> callback) {
    std::lock_guard lock(mutex_);
    on_empty_ = std::move(callback);
  }

 private:
  struct Entry {
    std::weak_ptr<Connection> connection;
    std::string client;  // the peer's address, without its port
  };
  mutable std::mutex mutex_;
  std::unordered_map<const Connection*, Entry> connections_;
  std::unordered_map<std::string, size_t> per_client_;
  std::function<void()> on_empty_;
};

}  // namespace duet::server
