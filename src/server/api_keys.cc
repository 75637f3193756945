#include "server/api_keys.h"

#include <cctype>

#include "base/sha256.h"

namespace duet::server {
namespace {

// Equal-length digests compared without an early exit.
bool digests_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string bearer_token(std::string_view header) {
  constexpr std::string_view kBearer = "bearer ";
  if (header.size() < kBearer.size()) return {};
  for (size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return {};
  return std::string(header.substr(kBearer.size()));
}

}  // namespace

ApiKeys::ApiKeys(const std::vector<std::string>& keys) {
  for (const auto& key : keys) digests_.push_back(sha256_hex(key));
}

bool ApiKeys::accepts(std::string_view authorization_header) const {
  return accepts_key(bearer_token(authorization_header));
}

bool ApiKeys::accepts_key(std::string_view key) const {
  if (digests_.empty()) return true;
  std::string digest = sha256_hex(key);
  bool accepted = false;
  for (const auto& key : digests_) accepted |= digests_equal(digest, key);  // every key, no early exit
  return accepted;
}

std::string key_owner(std::string_view authorization_header) {
  std::string token = bearer_token(authorization_header);
  return token.empty() ? std::string() : sha256_hex(token);
}

}  // namespace duet::server
