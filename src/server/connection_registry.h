#pragma once
// The connections open now, so the server can count them against --max-connections and reach each one when it
// stops. A connection adds itself when accepted and removes itself when destroyed (on any thread).
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace duet::server {

template <typename Connection>
class ConnectionRegistry {
 public:
  // Returns how many are open with this one.
  size_t add(const std::shared_ptr<Connection>& connection) {
    std::lock_guard lock(mutex_);
    connections_[connection.get()] = connection;
    return connections_.size();
  }
  void remove(const Connection* connection) {
    std::function<void()> on_empty;
    {
      std::lock_guard lock(mutex_);
      connections_.erase(connection);
      if (connections_.empty()) on_empty = on_empty_;
    }
    if (on_empty) on_empty();
  }
  size_t size() const {
    std::lock_guard lock(mutex_);
    return connections_.size();
  }
  // Calls `visit` (outside the lock) for every connection still alive.
  void for_each(const std::function<void(const std::shared_ptr<Connection>&)>& visit) const {
    std::vector<std::shared_ptr<Connection>> alive;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [key, weak] : connections_)
        if (auto connection = weak.lock()) alive.push_back(std::move(connection));
    }
    for (const auto& connection : alive) visit(connection);
  }
  // Called whenever the last connection goes (null: nothing). It must not block.
  void on_empty(std::function<void()> callback) {
    std::lock_guard lock(mutex_);
    on_empty_ = std::move(callback);
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> connections_;
  std::function<void()> on_empty_;
};

}  // namespace duet::server
