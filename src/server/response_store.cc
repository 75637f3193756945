#include "server/response_store.h"

#include "server/errors.h"

namespace duet::server {
namespace {

using OJson = nlohmann::ordered_json;

std::string key_of(const std::string& owner, const std::string& id) { return owner + '\n' + id; }

// Every item of a stored response that an item_reference may name: its input items and its output items.
template <typename F>
void for_each_item(const StoredResponse& stored, F&& f) {
  for (const auto& item : stored.input)
    if (item.contains("id") && item["id"].is_string()) f(item);
  if (auto output = stored.response.find("output"); output != stored.response.end() && output->is_array())
    for (const auto& item : *output)
      if (item.contains("id") && item["id"].is_string()) f(item);
}

}  // namespace

void ResponseStore::set_limits(Limits limits) {
  std::lock_guard lock(mutex_);
  limits_ = limits;
  drop_expired_and_excess();
}

void ResponseStore::put(const std::string& owner, StoredResponse stored) {
  const std::string id = stored.response.value("id", std::string());
  // Counted as the JSON text it is answered with; the maps' own memory is small beside it.
  const size_t bytes = json_text(stored.response).size() + json_text(stored.input).size() + owner.size() + id.size();
  std::lock_guard lock(mutex_);
  if (auto old = by_key_.find(key_of(owner, id)); old != by_key_.end()) drop(old->second);
  if (bytes > limits_.max_bytes) return;
  entries_.push_front(Entry{key_of(owner, id), owner, std::move(stored), bytes, now_()});
  auto it = entries_.begin();
  by_key_[it->key] = it;
  for_each_item(it->stored,
                [&](const OJson& item) { item_to_key_[key_of(owner, item["id"].get<std::string>())] = it->key; });
  bytes_ += bytes;
  drop_expired_and_excess();
}

ResponseStore::Entries::iterator ResponseStore::find(const std::string& owner, const std::string& id) {
  auto found = by_key_.find(key_of(owner, id));
  if (found == by_key_.end()) return entries_.end();
  auto it = found->second;
  if (now_() - it->created > limits_.ttl) {
    drop(it);
    return entries_.end();
  }
  entries_.splice(entries_.begin(), entries_, it);  // used: now the most recent
  return it;
}

std::optional<StoredResponse> ResponseStore::get(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = find(owner, id);
  if (it == entries_.end()) return std::nullopt;
  return it->stored;
}

std::optional<OJson> ResponseStore::item(const std::string& owner, const std::string& item_id) {
  std::lock_guard lock(mutex_);
  auto key = item_to_key_.find(key_of(owner, item_id));
  if (key == item_to_key_.end()) return std::nullopt;
  auto it = find(owner, key->second.substr(owner.size() + 1));
  if (it == entries_.end()) return std::nullopt;
  std::optional<OJson> found;
  for_each_item(it->stored, [&](const OJson& item) {
    if (!found && item["id"] == item_id) found = item;
  });
  return found;
}

bool ResponseStore::erase(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = find(owner, id);
  if (it == entries_.end()) return false;
  drop(it);
  return true;
}

size_t ResponseStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

void ResponseStore::drop(Entries::iterator it) {
  for_each_item(it->stored, [&](const OJson& item) {
    auto indexed = item_to_key_.find(key_of(it->owner, item["id"].get<std::string>()));
    if (indexed != item_to_key_.end() && indexed->second == it->key) item_to_key_.erase(indexed);
  });
  by_key_.erase(it->key);
  bytes_ -= it->bytes;
  entries_.erase(it);
}

void ResponseStore::drop_expired_and_excess() {
  const auto now = now_();
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (now - it->created > limits_.ttl) drop(it);
    it = next;
  }
  while (bytes_ > limits_.max_bytes && !entries_.empty()) drop(std::prev(entries_.end()));
}

}  // namespace duet::server
