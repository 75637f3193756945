#include "base/sha256.h"

#include <gtest/gtest.h>

namespace duet {
namespace {

// Test vectors from FIPS 180-2.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(std::string_view("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string_view("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, IdsAreHashedAsLittleEndianInt32) {
  const int32_t ids[] = {0x00636261};  // bytes 'a' 'b' 'c' 0
  EXPECT_EQ(sha256_of_ids(ids), sha256_hex(std::string_view("abc\0", 4)));
}

}  // namespace
}  // namespace duet
