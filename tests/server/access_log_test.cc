// The access-log line: every field present when known, left out when not, and no client value able to forge one.
#include "server/access_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace duet::server {
namespace {

AccessRecord generation() {
  AccessRecord record;
  record.method = "POST";
  record.route = "/v1/chat/completions";
  record.client = "127.0.0.1:5555";
  record.status = 200;
  record.prompt_tokens = 12;
  record.completion_tokens = 5;
  record.cached_tokens = 0;
  record.time_to_first_token_s = 0.25;
  record.total_s = 1.5;
  record.user = "alice\" status=500 x=\"";  // a client trying to add a field of its own
  return record;
}

TEST(AccessLog, JsonLineHasEveryField) {
  const auto line = nlohmann::json::parse(access_line(generation(), true));
  EXPECT_EQ(line["route"], "/v1/chat/completions");
  EXPECT_EQ(line["status"], 200);
  EXPECT_EQ(line["prompt_tokens"], 12);
  EXPECT_EQ(line["completion_tokens"], 5);
  EXPECT_EQ(line["cached_tokens"], 0);
  EXPECT_DOUBLE_EQ(line["ttft_s"], 0.25);
  EXPECT_DOUBLE_EQ(line["total_s"], 1.5);
  EXPECT_EQ(line["client"], "127.0.0.1:5555");
  EXPECT_EQ(line["user"], "alice\" status=500 x=\"");
  EXPECT_FALSE(line.contains("safety_identifier"));
}

TEST(AccessLog, TextLineQuotesClientValues) {
  const std::string line = access_line(generation(), false);
  EXPECT_EQ(line,
            "access method=\"POST\" route=\"/v1/chat/completions\" status=200 client=\"127.0.0.1:5555\" total_s=1.5000 "
            "prompt_tokens=12 completion_tokens=5 cached_tokens=0 ttft_s=0.2500 user=\"alice\\\" status=500 x=\\\"\"");
}

TEST(AccessLog, RequestsWithoutTokensLeaveThemOut) {
  AccessRecord record;
  record.method = "GET";
  record.route = "unmatched";
  record.status = 404;
  const std::string line = access_line(record, false);
  EXPECT_EQ(line.find("tokens"), std::string::npos) << line;
  EXPECT_EQ(line.find("ttft"), std::string::npos) << line;
}

}  // namespace
}  // namespace duet::server
