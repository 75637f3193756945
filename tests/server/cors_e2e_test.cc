// CORS as a browser reads it (the Fetch standard): every Access-Control-* header and Vary at most once in an answer,
// since a browser refuses a preflight whose Access-Control-Allow-Origin holds two values. Checked on the raw header
// lines of `duet serve` on the demo, for a listed origin and for `*`, on a preflight, a served request and a 401;
// then in a real browser.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "../tests_dir.h"
#include "server_process.h"

namespace duet::testing {
namespace {

using Json = nlohmann::json;

const std::string kKey = "sk-cors-test";
const std::string kOrigin = "http://127.0.0.1:5173";

const char* const kCorsHeaders[] = {"Access-Control-Allow-Origin",   "Access-Control-Allow-Methods",
                                    "Access-Control-Allow-Headers",  "Access-Control-Max-Age",
                                    "Access-Control-Expose-Headers", "Vary"};

// Each CORS header appears at most once; `required` ones exactly once.
void expect_each_once(const httplib::Result& res, std::initializer_list<const char*> required,
                      const std::string& what) {
  ASSERT_TRUE(res) << what;
  for (const char* name : kCorsHeaders) EXPECT_LE(res->get_header_value_count(name), 1u) << what << ": " << name;
  for (const char* name : required) EXPECT_EQ(res->get_header_value_count(name), 1u) << what << ": " << name;
}

class CorsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--no-thinking", "--context", "256", "--max-tokens", "4", "--api-key", kKey, "--cors-origin", GetParam()});
  }
  bool listed() const { return GetParam() != "*"; }
  std::unique_ptr<ServerProcess> server_;
};

TEST_P(CorsTest, PreflightCarriesEachHeaderOnce) {
  const httplib::Headers preflight = {{"Origin", kOrigin},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "authorization,content-type"}};
  auto res = server_->client().Options("/v1/chat/completions", preflight);
  expect_each_once(res,
                   {"Access-Control-Allow-Origin", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers",
                    "Access-Control-Max-Age"},
                   "preflight");
  EXPECT_EQ(res->status, 204);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), listed() ? kOrigin : "*");
  EXPECT_EQ(res->get_header_value_count("Vary"), listed() ? 1u : 0u);
}

TEST_P(CorsTest, AnswersCarryEachHeaderOnce) {
  auto client = server_->client();
  auto refused = client.Get("/v1/models", {{"Origin", kOrigin}});
  expect_each_once(refused, {"Access-Control-Allow-Origin", "Access-Control-Expose-Headers"}, "401");
  EXPECT_EQ(refused->status, 401);
  auto served =
      client.Post("/v1/chat/completions", {{"Origin", kOrigin}, {"Authorization", "Bearer " + kKey}},
                  R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})", "application/json");
  expect_each_once(served, {"Access-Control-Allow-Origin", "Access-Control-Expose-Headers"}, "200");
  EXPECT_EQ(served->status, 200) << served->body;
}

// docs/api.md: an origin not listed is 403 with type `permission_error` (OpenAI's type for 403).
TEST_P(CorsTest, ForeignOriginIsAPermissionError) {
  if (!listed()) GTEST_SKIP() << "`*` allows every origin";
  auto res = server_->client().Options("/v1/chat/completions",
                                       {{"Origin", "http://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(res->get_header_value_count("Access-Control-Allow-Origin"), 0u);
  Json error = Json::parse(res->body)["error"];
  EXPECT_EQ(error["type"], "permission_error");
  EXPECT_EQ(error["code"], "cors_origin_not_allowed");
}

INSTANTIATE_TEST_SUITE_P(ListedAndAny, CorsTest, ::testing::Values(kOrigin, std::string("*")),
                         [](const auto& info) { return info.param == "*" ? "any" : "listed"; });

// A free loopback port for the browser test's pages (bound, read, released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  ::close(fd);
  return ntohs(address.sin_port);
}

// Debian's chromium, headless, loads a page from one loopback origin that calls duet on another with Authorization,
// whole and streamed; an unlisted origin is refused by the browser (tests/server/clients/browser_cors.mjs).
TEST(CorsBrowser, ChromiumCallsDuetFromAnotherOrigin) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  const std::string tests = tests_dir();
  if (!std::filesystem::exists(tests + "/node_modules/puppeteer-core"))
    FAIL() << "puppeteer-core is not installed: run scripts/test-deps.sh";
  if (!std::filesystem::exists("/usr/bin/chromium")) FAIL() << "chromium is not installed: run scripts/setup.sh";
  const int page_port = free_port(), other_port = free_port();
  const std::vector<std::string> flags = {"--no-thinking", "--context", "256", "--max-tokens", "4", "--api-key", kKey};
  auto with_origin = [&](const std::string& origin) {
    auto all = flags;
    all.insert(all.end(), {"--cors-origin", origin});
    return all;
  };
  ServerProcess listed(with_origin("http://127.0.0.1:" + std::to_string(page_port)));
  ServerProcess any(with_origin("*"));
  auto result = run_command("node " + tests + "/server/clients/browser_cors.mjs " + listed.url() + " " + any.url() +
                            " " + kKey + " " + std::to_string(page_port) + " " + std::to_string(other_port) + " 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("browser cors: ok"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace duet::testing
