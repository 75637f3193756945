// The store of responses (server/response_store.h): per key, least recently used evicted past the byte budget,
// expired past the TTL, items found by id, nothing of one key visible to another.
#include "server/response_store.h"

#include <gtest/gtest.h>

namespace duet::server {
namespace {

using OJson = nlohmann::ordered_json;

StoredResponse response(const std::string& id, const std::string& text = "hello") {
  StoredResponse stored;
  stored.response = {{"id", id},
                     {"object", "response"},
                     {"output", {{{"type", "message"}, {"id", "msg_out_" + id}, {"content", text}}}}};
  stored.input = OJson::array({{{"type", "message"}, {"id", "msg_in_" + id}, {"role", "user"}, {"content", "hi"}}});
  return stored;
}

TEST(ResponseStore, AResponseIsVisibleOnlyToItsKey) {
  ResponseStore store;
  store.put("alice", response("resp_1"));
  ASSERT_TRUE(store.get("alice", "resp_1"));
  EXPECT_EQ(store.get("alice", "resp_1")->response["id"], "resp_1");
  EXPECT_FALSE(store.get("bob", "resp_1"));
  EXPECT_FALSE(store.get("", "resp_1"));
  EXPECT_TRUE(store.item("alice", "msg_out_resp_1"));
  EXPECT_EQ(store.item("alice", "msg_in_resp_1")->value("role", ""), "user");
  EXPECT_FALSE(store.item("bob", "msg_out_resp_1"));
  EXPECT_FALSE(store.erase("bob", "resp_1"));
  EXPECT_TRUE(store.erase("alice", "resp_1"));
  EXPECT_FALSE(store.get("alice", "resp_1"));
  EXPECT_FALSE(store.item("alice", "msg_out_resp_1"));
  EXPECT_EQ(store.bytes(), 0u);
}

TEST(ResponseStore, TheLeastRecentlyUsedGoesFirst) {
  ResponseStore store;
  store.put("k", response("resp_p"));
  const size_t one = store.bytes();
  store.erase("k", "resp_p");
  store.set_limits({3 * one + one / 2, std::chrono::seconds(3600)});  // room for three
  store.put("k", response("resp_a"));
  store.put("k", response("resp_b"));
  store.put("k", response("resp_c"));
  ASSERT_TRUE(store.get("k", "resp_a"));  // a is now the most recently used; b the least
  store.put("k", response("resp_d"));
  EXPECT_TRUE(store.get("k", "resp_a"));
  EXPECT_FALSE(store.get("k", "resp_b"));
  EXPECT_FALSE(store.item("k", "msg_out_resp_b"));
  EXPECT_TRUE(store.get("k", "resp_c"));
  EXPECT_TRUE(store.get("k", "resp_d"));
  EXPECT_LE(store.bytes(), 3 * one + one / 2);
  // One larger than the whole store is not kept, and evicts nothing.
  store.put("k", response("resp_big", std::string(4 * one, 'x')));
  EXPECT_FALSE(store.get("k", "resp_big"));
  EXPECT_TRUE(store.get("k", "resp_a"));
  store.set_limits({0, std::chrono::seconds(3600)});  // --responses-store-mib 0 keeps none
  EXPECT_FALSE(store.get("k", "resp_a"));
  store.put("k", response("resp_e"));
  EXPECT_FALSE(store.get("k", "resp_e"));
}

TEST(ResponseStore, ExpiresAfterItsTtl) {
  ResponseStore store;
  auto now = ResponseStore::Clock::now();
  store.set_clock([&] { return now; });
  store.set_limits({1 << 20, std::chrono::seconds(60)});
  store.put("k", response("resp_old"));
  now += std::chrono::seconds(30);
  store.put("k", response("resp_new"));
  ASSERT_TRUE(store.get("k", "resp_old"));  // using it does not extend its life
  now += std::chrono::seconds(31);
  EXPECT_FALSE(store.get("k", "resp_old"));
  EXPECT_FALSE(store.item("k", "msg_in_resp_old"));
  EXPECT_TRUE(store.get("k", "resp_new"));
}

}  // namespace
}  // namespace duet::server
