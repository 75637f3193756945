// The engine serving a prompt with an image (issue 21) on tiny-vl and the CPU backend: the vision tower run by the
// engine (EngineOptions::vision) on small_png as src/image preprocesses it, the prompt of transformers' `decode`
// golden (vision.fp32.safetensors), and the tokens compared with transformers' six greedy tokens (decode.fed). The
// prompt whole and cut into chunks of 64 (the cut falls inside the image, whose tokens are 4..73), with drafts verified
// (right and wrong ones, so accepted and rewound rows), beside a text request, as two forked choices: always the same
// tokens. The prompt cache keys images by their pixels: the same image resumes, another image of the same grid (the
// same token ids) does not, and gives a fresh engine's bytes. The tower spread over steps a stage at a time beside a
// decoding request gives the same bits as run whole. An engine without a tower refuses images by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "../tests_dir.h"
#include "../vision_golden_logprobs.h"
#include "checkpoint/checkpoint.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine_harness.h"
#include "image/decode.h"
#include "image/processor_config.h"
#include "image/resize.h"
#include "image/smart_resize.h"
#include "model/model.h"
#include "model/vision_model.h"

namespace duet::engine {
namespace {

using testing::drain;
using testing::Outcome;

const std::string kModelDir = ::duet::testing::tests_dir() + "/fixtures/models/tiny-vl";

std::vector<int32_t> golden(const std::string& name) {
  const auto file =
      checkpoint::Checkpoint::open_file(::duet::testing::tests_dir() + "/fixtures/goldens/vision.fp32.safetensors");
  const auto& t = file.require(name, {checkpoint::DType::i32}, file.find(name)->shape);
  return {t.data<int32_t>(), t.data<int32_t>() + t.element_count()};
}

// A fixture image (small_png by default) as the checkpoint's processor leaves it.
PromptImage small_png(int32_t first_token, const std::string& name = "small_png.png") {
  std::ifstream in(::duet::testing::tests_dir() + "/fixtures/vision/images/" + name, std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto processor = image::ProcessorConfig::load(kModelDir + "/preprocessor_config.json");
  const image::Image decoded = image::decode(bytes);
  const image::Size size = image::smart_resize(decoded.height, decoded.width, processor.factor(), processor.min_pixels,
                                               processor.max_pixels);
  image::Patches patches = image::to_patches(image::resize_bicubic(decoded, size.width, size.height), processor.layout);
  return {.pixel_values = std::move(patches.values),
          .t = static_cast<int32_t>(patches.grid_t),
          .h = static_cast<int32_t>(patches.grid_h),
          .w = static_cast<int32_t>(patches.grid_w),
          .first_token = first_token};
}

// The tokens' log-probabilities against transformers' (vision_golden_logprobs.h): the largest difference.
double logprob_error(const Outcome& out) {
  const std::vector<double> want = ::duet::testing::vision_golden_logprobs();
  double worst = out.logprobs.size() == want.size() ? 0 : INFINITY;
  for (size_t k = 0; k < want.size() && k < out.logprobs.size(); ++k)
    worst = std::max(worst, out.logprobs[k] ? std::abs(*out.logprobs[k] - want[k]) : INFINITY);
  return worst;
}

// Within what the decode rows' 1e-4 relative gate allows; decode rows without the rope delta miss it by far.
constexpr double kLogprobGate = 1e-3;

class VisionEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = model::Model::load(kModelDir);
    vision_ = model::VisionModel::load(kModelDir, model_->config().hidden_size);
  }
  static void TearDownTestSuite() {
    model_.reset();
    vision_.reset();
  }

  // The golden prompt (3 text ids, the image's markup, 4 text ids) with small_png (or `image`, of the same grid),
  // greedy for six tokens; after `text` when given.
  static Request image_request(const std::string& image = "small_png.png", const std::vector<int32_t>& text = {}) {
    std::vector<int32_t> prompt = text;
    const std::vector<int32_t> golden_prompt = golden("decode.ids");
    prompt.insert(prompt.end(), golden_prompt.begin(), golden_prompt.end());
    Request r = testing::greedy_request(prompt, 6);
    r.sampling.top_logprobs = 0;  // the sampled token's log-probability
    const auto first = std::find(r.prompt.begin(), r.prompt.end(), model_->config().image_token_id);
    r.images = std::make_shared<std::vector<PromptImage>>(
        std::vector{small_png(static_cast<int32_t>(first - r.prompt.begin()), image)});
    return r;
  }

  static EngineOptions options() {
    EngineOptions o;
    o.parallel = 2;
    o.context = 256;
    o.vision = vision_;
    return o;
  }

  static inline std::unique_ptr<model::Model> model_;
  static inline std::shared_ptr<const model::VisionModel> vision_;
};

TEST_F(VisionEngine, WholeAndChunkedPromptsGiveTransformersTokens) {
  const std::vector<int32_t> want = golden("decode.fed");
  Engine whole(*model_, nullptr, options());
  const Outcome a = drain(*whole.submit(image_request()));
  EXPECT_EQ(a.tokens, want);
  std::printf("image prompt through the engine: tokens %s transformers', log-probabilities within %.2e\n",
              a.tokens == want ? "equal" : "differ from", logprob_error(a));
  EXPECT_LE(logprob_error(a), kLogprobGate);
  EXPECT_EQ(a.finished.prompt_tokens, 79);
  EngineOptions chunked_options = options();
  chunked_options.prefill_chunk = 64;
  chunked_options.step_token_budget = 64;  // the 79-token prompt in two steps: 64 (cutting the image), then 15
  Engine chunked(*model_, nullptr, chunked_options);
  const Outcome b = drain(*chunked.submit(image_request()));
  EXPECT_EQ(b.tokens, want);
  EXPECT_EQ(b.logprobs, a.logprobs) << "chunks must give the whole prompt's bytes";
  EXPECT_EQ(chunked.stats().steps_total, whole.stats().steps_total + 1) << "the prompt must have been cut";
}

// Decode steps launched ahead (EngineOptions::lookahead) after an image prompt: their rows take the prompt's rope delta
// as the steps planned after the last one's tokens do, so the tokens are transformers' and the logprobs the same bytes.
TEST_F(VisionEngine, DecodeLaunchedAheadTakesTheRopeDelta) {
  EngineOptions plain_options = options(), ahead_options = options();
  plain_options.lookahead = EngineOptions::Lookahead::never;
  ahead_options.lookahead = EngineOptions::Lookahead::always;
  Engine plain(*model_, nullptr, plain_options);
  Engine ahead(*model_, nullptr, ahead_options);
  const Outcome a = drain(*plain.submit(image_request()));
  const Outcome b = drain(*ahead.submit(image_request()));
  EXPECT_EQ(b.tokens, golden("decode.fed"));
  EXPECT_EQ(b.logprobs, a.logprobs);
  EXPECT_GT(ahead.stats().steps_ahead_total, 0);
  EXPECT_EQ(plain.stats().steps_ahead_total, 0);
}

// Drafts are verified by decode rows of the main model, which take the rope delta. The oracle proposes the right
// continuation (accepted) or a wrong one (rejected, the rows taken back); the tokens are the same either way.
TEST_F(VisionEngine, VerifiedDraftsTakeTheRopeDelta) {
  const std::vector<int32_t> want = golden("decode.fed");
  for (const bool right : {true, false}) {
    EngineOptions o = options();
    o.draft.kind = DraftKind::oracle;
    o.draft.tokens = 3;
    o.draft.test_oracle = [&](const Request&, std::span<const int32_t> generated, int32_t count) {
      std::vector<int32_t> drafts;
      for (size_t k = generated.size(); k < want.size() && drafts.size() < static_cast<size_t>(count); ++k)
        drafts.push_back(right ? want[k] : (want[k] + 1) % 500);
      return drafts;
    };
    Engine engine(*model_, nullptr, o);
    const Outcome out = drain(*engine.submit(image_request()));
    EXPECT_EQ(out.tokens, want) << (right ? "right" : "wrong") << " drafts";
    EXPECT_LE(logprob_error(out), kLogprobGate) << (right ? "right" : "wrong") << " drafts";
    const EngineStats stats = engine.stats();
    EXPECT_GT(stats.verify_pieces_total, 0);
    EXPECT_EQ(stats.drafts_accepted[0] > 0, right);
  }
}

// The prompt cache keys a prompt's images by their pixel values (engine/image_cache_key.h). The golden prompt's first
// block (64 tokens) cuts small_png's run of image tokens (4..73): the same request again resumes it and gives the same
// bytes; gray_png has the same grid, so the same token ids, and must not resume it: it gives what a fresh engine gives
// it (and, the control, not small_png's answer). Again with a planted collision (every block hashes alike), where only
// the comparison of the images on a hit tells them apart.
TEST_F(VisionEngine, PromptCacheResumesOnlyTheSameImage) {
  Engine fresh(*model_, nullptr, options());
  const Outcome gray_fresh = drain(*fresh.submit(image_request("gray_png.png")));
  for (const bool collide : {false, true}) {
    EngineOptions o = options();
    o.prompt_cache_bytes = size_t{16} << 20;
    if (collide) o.prompt_cache_block_hash = [](uint64_t, std::span<const int32_t>) { return uint64_t{42}; };
    Engine engine(*model_, nullptr, o);
    const Outcome first = drain(*engine.submit(image_request()));
    EXPECT_EQ(first.tokens, golden("decode.fed"));
    EXPECT_EQ(first.finished.cached_tokens, 0);
    const Outcome again = drain(*engine.submit(image_request()));
    EXPECT_EQ(again.finished.cached_tokens, 64) << "collide " << collide;
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.logprobs, first.logprobs) << "a resumed prompt gives the fresh one's bytes";
    const Outcome gray = drain(*engine.submit(image_request("gray_png.png")));
    EXPECT_EQ(gray.finished.cached_tokens, 0) << "collide " << collide << ": another image was resumed";
    EXPECT_EQ(gray.tokens, gray_fresh.tokens);
    EXPECT_EQ(gray.logprobs, gray_fresh.logprobs) << "collide " << collide;
    EXPECT_NE(gray.logprobs, first.logprobs) << "the control: the two images must answer differently";
    EXPECT_EQ(engine.stats().prompt_cache_hits, 1);
    EXPECT_EQ(engine.stats().vision_images_total, 3) << "the image cut by the resumed prefix is encoded again";
  }
}

// Text before the image is resumed whatever the image: 100 text tokens, then the golden prompt (its image at 104), with
// a cache hint at 100 (the block end 64, text only) beside the prompt's own block end 128 (inside the image). Another
// image resumes the 64 text tokens only; the same image resumes 128.
TEST_F(VisionEngine, PromptCacheResumesTheTextBeforeAnotherImage) {
  std::vector<int32_t> text(100);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<int32_t>(10 + i * 3 % 200);
  const auto with_hint = [&](const std::string& image) {
    Request r = image_request(image, text);
    r.cache_hints = {100};
    return r;
  };
  Engine fresh(*model_, nullptr, options());
  const Outcome gray_fresh = drain(*fresh.submit(with_hint("gray_png.png")));
  EngineOptions o = options();
  o.prompt_cache_bytes = size_t{16} << 20;
  Engine engine(*model_, nullptr, o);
  const Outcome small = drain(*engine.submit(with_hint("small_png.png")));
  EXPECT_EQ(small.finished.cached_tokens, 0);
  const Outcome gray = drain(*engine.submit(with_hint("gray_png.png")));
  EXPECT_EQ(gray.finished.cached_tokens, 64);
  EXPECT_EQ(gray.tokens, gray_fresh.tokens);
  EXPECT_EQ(gray.logprobs, gray_fresh.logprobs);
  const Outcome small_again = drain(*engine.submit(with_hint("small_png.png")));
  EXPECT_EQ(small_again.finished.cached_tokens, 128);
  EXPECT_EQ(small_again.logprobs, small.logprobs);
}

// A prompt resumed from the prompt cache past an image does not run the tower on it: the golden prompt twice,
// small_png at 4..73 and gray_png at 83..152 (158 tokens, its last full block, 128, kept). The same request again
// resumes 128 tokens, the first image wholly inside them and the second cut by them: the tower encodes 2 images for the
// first request and 1 for the second (EngineStats::vision_images_total), and the resumed answer is the fresh one's
// bytes, and those of an engine without a cache. (The control, an image cut by the resumed prefix, which is encoded
// again: PromptCacheResumesOnlyTheSameImage.)
TEST_F(VisionEngine, AResumedPromptRunsTheTowerOnlyOnImagesItStillReads) {
  std::vector<int32_t> prompt = golden("decode.ids");
  const std::vector<int32_t> once = prompt;
  prompt.insert(prompt.end(), once.begin(), once.end());
  Request request = testing::greedy_request(prompt, 6);
  request.sampling.top_logprobs = 0;
  const auto image_token = model_->config().image_token_id;
  const auto first = std::find(prompt.begin(), prompt.end(), image_token) - prompt.begin();
  const auto second =
      std::find(prompt.begin() + static_cast<long>(once.size()), prompt.end(), image_token) - prompt.begin();
  request.images = std::make_shared<std::vector<PromptImage>>(
      std::vector{small_png(static_cast<int32_t>(first)), small_png(static_cast<int32_t>(second), "gray_png.png")});
  ASSERT_EQ(first, 4);
  ASSERT_EQ(second, 83);

  Engine fresh(*model_, nullptr, options());
  const Outcome alone = drain(*fresh.submit(request));
  EXPECT_EQ(fresh.stats().vision_images_total, 2);
  EngineOptions o = options();
  o.prompt_cache_bytes = size_t{16} << 20;
  Engine engine(*model_, nullptr, o);
  const Outcome a = drain(*engine.submit(request));
  EXPECT_EQ(a.finished.cached_tokens, 0);
  EXPECT_EQ(engine.stats().vision_images_total, 2);
  const Outcome b = drain(*engine.submit(request));
  EXPECT_EQ(b.finished.cached_tokens, 128);
  EXPECT_EQ(engine.stats().vision_images_total, 3) << "the image inside the resumed prefix was encoded again";
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(b.logprobs, a.logprobs) << "a resumed prompt gives the fresh one's bytes";
  EXPECT_EQ(a.logprobs, alone.logprobs);
  EXPECT_GT(engine.stats().vision_seconds_total, 0);
}

TEST_F(VisionEngine, BesideTextAndAsForkedChoices) {
  Engine engine(*model_, nullptr, options());
  const Request text = testing::greedy_request({5, 6, 7, 8, 9, 10, 11}, 10);
  const Outcome text_alone = drain(*engine.submit(text));
  auto image = engine.submit(image_request());
  auto beside = engine.submit(text);
  EXPECT_EQ(drain(*image).tokens, golden("decode.fed"));
  EXPECT_EQ(drain(*beside).tokens, text_alone.tokens);
  // Two choices: the second starts from a copy of the first's state after its last prompt chunk.
  for (const auto& handle : engine.submit_choices({image_request(), image_request()})) {
    const Outcome out = drain(*handle);
    EXPECT_EQ(out.tokens, golden("decode.fed"));
    EXPECT_LE(logprob_error(out), kLogprobGate);
  }
}

// The tower as a step kind of its own (engine/tower_runner.h): beside a decoding text request, --vision-step-ms 0 runs
// one tower stage a step (tiny-vl: the embedding, 2 blocks, the merger), and the image prompt prefills once its rows
// are whole; alone, the tower runs whole in one step. Either way every token is the same. The control: a share no
// stage fills runs the whole tower in the step it starts in, beside the text as well.
TEST_F(VisionEngine, TheTowerRunsAStageAStepBesideOthers) {
  // The text decodes nearly to the context's end (256), so that it is still decoding when the image arrives even if
  // this thread loses its core between the two submits: with 64 tokens a busy machine (ctest beside a build) let the
  // text end first now and then, and the tower then ran alone, whole in one step.
  const Request text = testing::greedy_request({5, 6, 7, 8, 9, 10, 11}, 240);
  const int32_t stages = static_cast<int32_t>(vision_->config().depth) + 2;
  Outcome text_alone;
  {
    Engine engine(*model_, nullptr, options());
    text_alone = drain(*engine.submit(text));
  }
  struct Run {
    Outcome image, text;
    EngineStats stats;
  };
  auto beside_text = [&](double step_ms) {
    EngineOptions o = options();
    o.vision_step_ms = step_ms;
    // The image request is made (its PNG read and processed) before the text starts: made in between, the text's
    // tokens could end first, and the tower would then run alone, whole in one step.
    const Request image = image_request();
    Engine engine(*model_, nullptr, o);
    auto text_handle = engine.submit(text);
    auto image_handle = engine.submit(image);
    Run run{.image = drain(*image_handle), .text = drain(*text_handle), .stats = {}};
    run.stats = engine.stats();
    return run;
  };
  const Run sliced = beside_text(0);
  EXPECT_EQ(sliced.image.tokens, golden("decode.fed"));
  EXPECT_LE(logprob_error(sliced.image), kLogprobGate);
  EXPECT_EQ(sliced.text.tokens, text_alone.tokens);
  EXPECT_EQ(sliced.text.logprobs, text_alone.logprobs);
  EXPECT_EQ(sliced.stats.vision_images_total, 1);
  EXPECT_EQ(sliced.stats.vision_stages_total, stages);
  EXPECT_EQ(sliced.stats.vision_steps_total, stages) << "one stage a step beside the decoding text";

  const Run whole = beside_text(1e6);  // the control: the whole tower in one step
  EXPECT_EQ(whole.stats.vision_stages_total, stages);
  EXPECT_EQ(whole.stats.vision_steps_total, 1);
  EXPECT_EQ(whole.image.tokens, sliced.image.tokens);
  EXPECT_EQ(whole.image.logprobs, sliced.image.logprobs) << "how the stages are spread must change no bits";
  EXPECT_EQ(whole.text.logprobs, sliced.text.logprobs);

  EngineOptions o = options();
  o.vision_step_ms = 0;
  Engine alone(*model_, nullptr, o);
  const Outcome image_alone = drain(*alone.submit(image_request()));
  EXPECT_EQ(image_alone.logprobs, sliced.image.logprobs);
  EXPECT_EQ(alone.stats().vision_steps_total, 1) << "with nothing beside it the tower stalls nobody: it runs whole";
  // Two choices of one image prompt, a stage a step: the second forks from the first's state.
  for (const auto& handle : alone.submit_choices({image_request(), image_request()}))
    EXPECT_EQ(drain(*handle).logprobs, sliced.image.logprobs);
  EXPECT_EQ(alone.stats().vision_images_total, 2);
}

// The memory plan counts the tower (issue 21 item 6): on the CPU backend its weights and one largest image's
// activations are in the total and named in the plan's line; a larger largest image costs more; no tower, no line.
TEST_F(VisionEngine, TheMemoryPlanCountsTheTower) {
  auto tower = model::VisionModel::load(kModelDir, model_->config().hidden_size);
  tower->set_max_patches(1024);
  EngineOptions o = options();
  o.vision = nullptr;
  const MemoryPlan without = plan_memory(*model_, o);
  EXPECT_EQ(without.vision_bytes, 0u);
  EXPECT_EQ(without.describe().find("vision tower"), std::string::npos) << without.describe();
  o.vision = std::shared_ptr<const model::VisionModel>(std::move(tower));
  const MemoryPlan with = plan_memory(*model_, o);
  EXPECT_GT(with.vision_bytes, o.vision->weight_bytes()) << "weights and a workspace";
  EXPECT_EQ(with.total_bytes, without.total_bytes + with.vision_bytes);
  EXPECT_NE(with.describe().find("vision tower"), std::string::npos) << with.describe();
  auto larger = model::VisionModel::load(kModelDir, model_->config().hidden_size);
  larger->set_max_patches(4096);
  o.vision = std::shared_ptr<const model::VisionModel>(std::move(larger));
  EXPECT_GT(plan_memory(*model_, o).vision_bytes, with.vision_bytes) << "a larger largest image needs more";
}

TEST_F(VisionEngine, ImagesNeedATower) {
  EngineOptions o = options();
  o.vision = nullptr;
  Engine engine(*model_, nullptr, o);
  try {
    engine.submit(image_request());
    FAIL() << "an engine without a tower must refuse images";
  } catch (const RequestInvalid& e) {
    EXPECT_EQ(e.code(), "invalid_images");
    EXPECT_NE(std::string(e.what()).find("no vision tower"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace duet::engine
