// engine/image_prompt.h: a request's images checked against its prompt (each refusal named), the 3-D positions and
// rope delta a prompt with images gets (model/mrope.h's), and the slices a prefill chunk takes, also when a chunk
// boundary cuts an image.
#include "engine/image_prompt.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

namespace duet::engine {
namespace {

constexpr int32_t kImage = 9;  // the image token of these tests
constexpr int64_t kRow = 6;    // pixel values per patch row

RequestLimits limits() {
  return {.vocab_size = 16, .context = 256, .image_token_id = kImage, .image_merge = 2, .image_patch_row = kRow};
}

PromptImage image(int32_t first, int32_t h, int32_t w) {
  return {.pixel_values = std::vector<float>(static_cast<size_t>(h * w * kRow)), .h = h, .w = w, .first_token = first};
}

// 2 text tokens, an image of 2 x 4 patches (2 tokens), 3 text tokens, an image of 4 x 4 (4 tokens), 1 text token.
Request request() {
  Request r;
  r.prompt = {1, 2, kImage, kImage, 3, 4, 5, kImage, kImage, kImage, kImage, 6};
  r.images = std::make_shared<std::vector<PromptImage>>(std::vector{image(2, 2, 4), image(7, 4, 4)});
  return r;
}

std::string refusal(const Request& r, const RequestLimits& l = limits()) {
  try {
    check_prompt_images(r, l);
  } catch (const RequestInvalid& e) {
    EXPECT_EQ(e.code(), "invalid_images");
    return e.what();
  }
  return {};
}

TEST(ImagePrompt, ChecksImagesAgainstThePrompt) {
  EXPECT_EQ(refusal(request()), "");
  RequestLimits no_tower = limits();
  no_tower.image_merge = 0;
  EXPECT_NE(refusal(request(), no_tower).find("no vision tower"), std::string::npos);
  Request decide = request();
  decide.kind = RequestKind::decide;
  EXPECT_NE(refusal(decide).find("decisions"), std::string::npos);
  auto with = [](std::vector<PromptImage> images) {
    Request r = request();
    r.images = std::make_shared<std::vector<PromptImage>>(std::move(images));
    return r;
  };
  EXPECT_NE(refusal(with({image(2, 3, 4), image(7, 4, 4)})).find("image 0: grid"), std::string::npos);
  PromptImage short_pixels = image(7, 4, 4);
  short_pixels.pixel_values.pop_back();
  EXPECT_NE(refusal(with({image(2, 2, 4), short_pixels})).find("image 1:"), std::string::npos);
  EXPECT_NE(refusal(with({image(3, 2, 4), image(7, 4, 4)})).find("not all the image token"), std::string::npos);
  EXPECT_NE(refusal(with({image(7, 4, 4), image(2, 2, 4)})).find("overlap"), std::string::npos);
  EXPECT_NE(refusal(with({image(2, 2, 4), image(9, 4, 4)})).find("leave the prompt"), std::string::npos);
  EXPECT_NE(refusal(with({image(7, 4, 4)})).find("holds 6 image tokens"), std::string::npos);  // a stray run
}

TEST(ImagePrompt, PositionsDeltaAndChunkSlices) {
  const Request r = request();
  ImagePrompt p(r.prompt, *r.images, kImage, 2);
  // Text 0, 1; image 1 at 2 + (row, col) of 1 x 2 merged; text from 2 + max(1, 2) = 4: 4, 5, 6; image 2 at 7 + (row,
  // col) of 2 x 2; the last token at 7 + 2 = 9. Delta = 9 + 1 - 12.
  const std::vector<int32_t> want = {0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 4, 4, 4, 5, 5, 5,
                                     6, 6, 6, 7, 7, 7, 7, 7, 8, 7, 8, 7, 7, 8, 8, 9, 9, 9};
  const auto all = p.positions(0, 12);
  EXPECT_EQ(std::vector<int32_t>(all.begin(), all.end()), want);
  EXPECT_EQ(p.rope_delta(), -2);
  EXPECT_EQ(p.image_tokens(), 6);
  // Rows: image token k's row holds k everywhere; a chunk gets the rows of its own image tokens only.
  const int64_t hidden = 3;
  std::vector<float> rows(static_cast<size_t>(6 * hidden));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i / hidden);
  EXPECT_FALSE(p.has_rows());
  p.set_rows(rows, hidden);
  EXPECT_TRUE(p.has_rows());
  EXPECT_TRUE(p.rows(0, 2).empty());
  const auto cut = p.rows(3, 5);  // the second token of image 1, text, the first image-2 token
  EXPECT_EQ(std::vector<float>(cut.begin(), cut.end()), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  const auto positions = p.positions(3, 2);
  EXPECT_EQ(std::vector<int32_t>(positions.begin(), positions.end()), (std::vector<int32_t>{2, 2, 3, 4, 4, 4}));
  EXPECT_THROW(p.set_rows(std::vector<float>(5), hidden), Error);
  p.drop_rows();
  EXPECT_FALSE(p.has_rows());
}

// A prompt resumed at a position needs no rows for the images wholly before it: the tower's rows then start at the
// first image with a token at or after the position, and each chunk from there takes its own rows from them.
TEST(ImagePrompt, RowsFromTheFirstNeededImage) {
  const Request r = request();  // image 1 at 2..3, image 2 at 7..10, 12 tokens
  ImagePrompt p(r.prompt, *r.images, kImage, 2);
  for (const auto& [position, first] :
       std::vector<std::pair<int32_t, size_t>>{{0, 0}, {2, 0}, {3, 0}, {4, 1}, {7, 1}, {10, 1}, {11, 2}, {12, 2}})
    EXPECT_EQ(p.first_needed_image(position), first) << position;
  const int64_t hidden = 3;
  std::vector<float> rows(static_cast<size_t>(4 * hidden));  // image 2's tokens, each holding its index among all six
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(2 + i / hidden);
  EXPECT_THROW(p.set_rows(rows, hidden), Error);  // 4 rows for the 6 tokens of both images
  EXPECT_THROW(p.set_rows(rows, hidden, 3), Error);
  p.set_rows(rows, hidden, 1);
  EXPECT_TRUE(p.has_rows());
  const auto tail = p.rows(8, 4);  // image 2's last three tokens, then text
  EXPECT_EQ(std::vector<float>(tail.begin(), tail.end()), (std::vector<float>{3, 3, 3, 4, 4, 4, 5, 5, 5}));
  EXPECT_TRUE(p.rows(4, 3).empty());  // the text between the images
  EXPECT_THROW(p.rows(3, 2), Error);  // image 1's last token has no row
  // Every image before the position: no rows at all, and the chunks after them need none.
  ImagePrompt q(r.prompt, *r.images, kImage, 2);
  q.set_rows({}, hidden, 2);
  EXPECT_TRUE(q.has_rows());
  EXPECT_TRUE(q.rows(11, 1).empty());
  q.drop_rows();
  EXPECT_FALSE(q.has_rows());
}

}  // namespace
}  // namespace duet::engine
