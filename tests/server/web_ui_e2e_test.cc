// The page GET / answers (src/server/web/index.html): served without a key, off with --no-ui, and used in Debian's
// chromium (tests/server/clients/browser_ui.mjs): a chat message streamed, the stop button, a decision's bars; and
// (browser_ui_images.mjs) an image sent from the chat to tiny-vl, which has a vision tower, and to the demo model
// served with --no-vision, which refuses it by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../tests_dir.h"
#include "server_process.h"

namespace duet::testing {
namespace {

const std::string kKey = "sk-web-ui-test";

TEST(WebUi, ServedWithoutAKeyAndOffWithNoUi) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  ServerProcess on({"--api-key", kKey, "--context", "256"});
  auto page = on.client().Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("<title>duet</title>"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("img-src data:;"), std::string::npos);
  EXPECT_EQ(on.client().Get("/v1/models")->status, 401) << "the API still needs the key";
  ServerProcess off({"--api-key", kKey, "--context", "256", "--no-ui"});
  auto none = off.client().Get("/", {{"Authorization", "Bearer " + kKey}});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

TEST(WebUi, ChromiumChatsStopsAndDecides) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  const std::string tests = tests_dir();
  if (!std::filesystem::exists(tests + "/node_modules/puppeteer-core"))
    FAIL() << "puppeteer-core is not installed: run scripts/test-deps.sh";
  if (!std::filesystem::exists("/usr/bin/chromium")) FAIL() << "chromium is not installed: run scripts/setup.sh";
  ServerProcess server({"--api-key", kKey, "--context", "1024"});
  const char* screenshot = std::getenv("DUET_UI_SCREENSHOT");  // a path prefix: writes PREFIX-chat.png, -decisions.png
  auto result = run_command("node " + tests + "/server/clients/browser_ui.mjs " + server.url() + " " + kKey + " " +
                            (screenshot ? screenshot : "") + " 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("browser ui: ok"), std::string::npos) << result.output;
}

TEST(WebUi, ChromiumSendsAnImage) {
  if (!demo_model_available()) GTEST_SKIP() << demo_model_missing_reason();
  const std::string tests = tests_dir();
  const std::string tiny_vl = tests + "/fixtures/models/tiny-vl";
  if (!std::filesystem::exists(tiny_vl + "/tokenizer.json")) GTEST_SKIP() << "tools/make_vision_tokenizer.py";
  if (!std::filesystem::exists(tests + "/node_modules/puppeteer-core"))
    FAIL() << "puppeteer-core is not installed: run scripts/test-deps.sh";
  if (!std::filesystem::exists("/usr/bin/chromium")) FAIL() << "chromium is not installed: run scripts/setup.sh";
  ServerProcess vision({"--api-key", kKey, "--backend", "cpu", "--parallel", "1", "--context", "512"}, tiny_vl);
  // The demo has a vision tower (tools/add_demo_vision_tower.py); --no-vision makes it a server that reads no images.
  ServerProcess text_only({"--api-key", kKey, "--context", "512", "--no-vision"});
  auto result = run_command("node " + tests + "/server/clients/browser_ui_images.mjs " + vision.url() + " " +
                            text_only.url() + " " + kKey + " " + tests + "/fixtures/vision/images/small_png.png 2>&1");
  EXPECT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("browser ui images: ok"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace duet::testing
