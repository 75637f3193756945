#pragma once
// The keys `--api-key` accepts, kept as sha256 digests and compared without an early exit, so the time a check
// takes says nothing about the key.
#include <string>
#include <string_view>
#include <vector>

namespace duet::server {

class ApiKeys {
 public:
  explicit ApiKeys(const std::vector<std::string>& keys);
  bool required() const { return !digests_.empty(); }
  // `Authorization: Bearer KEY` (the scheme in any case) with an accepted key; always true when none is required.
  bool accepts(std::string_view authorization_header) const;
  // Anthropic's clients send the key itself in `x-api-key`; accepted as the bearer token is.
  bool accepts_key(std::string_view key) const;

 private:
  std::vector<std::string> digests_;
};

// Whose stored responses a request may see: the sha256 of its bearer token (every request without one shares "").
std::string key_owner(std::string_view authorization_header);

}  // namespace duet::server
