// data: URLs: the payload is Python's base64 of a fixture (an independent encoder); wrong types and bad base64 are
// refused by name, an oversized one before anything is decoded.
#include "image/data_url.h"

#include <gtest/gtest.h>

#include "fixtures.h"
#include "image/base64.h"
#include "image/decode.h"

namespace duet::image {
namespace {

using testing::fixture_path;
using testing::read_bytes;

std::string payload() {
  const std::vector<uint8_t> text = read_bytes(fixture_path("rgb8.png.b64"));
  return {text.begin(), text.end()};
}

std::string refusal(const std::string& url, size_t max_bytes = 1 << 20) {
  try {
    parse_data_url(url, max_bytes);
  } catch (const ImageError& error) {
    return error.what();
  }
  return "(parsed)";
}

TEST(DataUrl, GivesTheFilesBytes) {
  const DataUrl url = parse_data_url("data:image/png;base64," + payload(), 1 << 20);
  EXPECT_EQ(url.media_type, "image/png");
  EXPECT_EQ(url.bytes, read_bytes(fixture_path("rgb8.png")));
  EXPECT_EQ(decode(url.bytes).width, 37u);
}

TEST(DataUrl, SchemeAndTypeAreCaseInsensitiveAndParametersAreSkipped) {
  EXPECT_EQ(parse_data_url("DATA:Image/PNG;name=x.png;BASE64," + payload(), 1 << 20).media_type, "image/png");
  EXPECT_TRUE(is_data_url("Data:image/png;base64,AAAA"));
  EXPECT_FALSE(is_data_url("https://example.com/a.png"));
}

TEST(DataUrl, TheDeclaredTypeIsNotTrusted) {
  // A PNG labelled JPEG decodes as the PNG it is.
  const DataUrl url = parse_data_url("data:image/jpeg;base64," + payload(), 1 << 20);
  EXPECT_EQ(decode(url.bytes).format, Format::kPng);
}

TEST(DataUrl, RefusalsNameTheProblem) {
  EXPECT_NE(refusal("https://example.com/a.png").find("does not start with \"data:\""), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64").find("no ','"), std::string::npos);
  EXPECT_NE(refusal("data:;base64,AAAA").find("no media type"), std::string::npos);
  EXPECT_NE(refusal("data:,AAAA").find("no media type"), std::string::npos);
  EXPECT_NE(refusal("data:text/plain;base64,AAAA").find("\"text/plain\" is not an image type"), std::string::npos);
  EXPECT_NE(refusal("data:application/octet-stream;base64,AAAA").find("not an image type"), std::string::npos);
  EXPECT_NE(refusal("data:image/png,%89PNG").find("not base64"), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64,").find("no data"), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64,iVBO!w0K").find("character '!' at offset 4"), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64,iVBO w0K").find("0x20 at offset 4"), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64,iV=Ow0KG").find("character '=' at offset 2"), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64,iVBOw").find("5 characters cannot be whole bytes"), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64,iVB==").find("not a multiple of 4"), std::string::npos);
  // Over the cap: refused from the text's length, before decoding (the payload here is not even valid base64).
  EXPECT_NE(refusal("data:image/png;base64," + std::string(4000, '!'), 1000).find("over the limit of 1000"),
            std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64," + payload(), 2000).find("over the limit of 2000"), std::string::npos);
}

TEST(Base64, DecodesWithAndWithoutPadding) {
  auto text = [](const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); };
  EXPECT_EQ(text(decode_base64("")), "");
  EXPECT_EQ(text(decode_base64("Zg==")), "f");
  EXPECT_EQ(text(decode_base64("Zm8=")), "fo");
  EXPECT_EQ(text(decode_base64("Zm9v")), "foo");
  EXPECT_EQ(text(decode_base64("Zm9vYg")), "foob");
  EXPECT_EQ(text(decode_base64("Zm9vYmE")), "fooba");
  EXPECT_EQ(text(decode_base64("Zm9vYmFy")), "foobar");
  EXPECT_EQ(text(decode_base64("+/+/")), "\xfb\xff\xbf");
}

}  // namespace
}  // namespace duet::image
