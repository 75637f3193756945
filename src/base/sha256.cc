#include "base/sha256.h"

#include <openssl/evp.h>

#include <vector>

#include "base/error.h"

namespace duet {

std::string sha256_hex(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1) fail("sha256 failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::string_view text) {
  return sha256_hex(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::string sha256_of_ids(std::span<const int32_t> ids) {
  std::vector<uint8_t> bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids)
    for (int shift = 0; shift < 32; shift += 8)
      bytes.push_back(static_cast<uint8_t>(static_cast<uint32_t>(id) >> shift));
  return sha256_hex(bytes);
}

}  // namespace duet
