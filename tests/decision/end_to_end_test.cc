// Decisions end to end on the CPU: the demo model's own forward pass (chunked prefill, final-norm rows on the host)
// and the head, against transformers' fp32 backbone plus the independent head (tests/fixtures/decisions/demo.json).
// Every request the goldens ran: |dp| <= 1e-4 and the same decision. Then through the engine: decisions share steps
// with chat and each other, four at once equal each alone byte for byte, chat is identical with and without
// decisions beside it, and a cancelled decision frees its slot.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "../engine/engine_harness.h"
#include "decision/answers.h"
#include "decision/head_inputs.h"
#include "decision_fixtures.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/piece_runner.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace duet::decision {
namespace {

using testing::decision_goldens;

// The gate of targets.md: end to end on the CPU, every probability within 1e-4 of the reference's.
constexpr double kTolerance = 1e-4;

class DecisionEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = model::Model::load(testing::demo_dir());
    tokenizer_ = tokenizer::Tokenizer::load_dir(testing::demo_dir());
    head_ = JointHead::load(testing::demo_dir(), model_->config().hidden_size);
  }
  static void TearDownTestSuite() {
    tokenizer_.reset();
    model_.reset();
    head_.reset();
  }

  static DecisionRequest request_of(const nlohmann::json& golden) {
    return validate_decision_request(parse_decision_body(golden.at("body").get<std::string>()));
  }

  // The decision's logits by the model's forward pass alone (no engine), the prompt cut into `chunk` rows.
  static std::vector<float> decide_directly(const Encoding& encoding, int32_t chunk) {
    HeadInputGatherer gatherer(head_, *model_, encoding);
    engine::PieceRunner runner(*model_, 1, static_cast<int32_t>(encoding.ids.size()));
    const int32_t slot = runner.open();
    for (size_t first = 0; first < encoding.ids.size(); first += static_cast<size_t>(chunk)) {
      const size_t count = std::min(static_cast<size_t>(chunk), encoding.ids.size() - first);
      const model::Piece piece{
          .slot = slot, .tokens = std::span(encoding.ids).subspan(first, count), .wants = model::RowOutput::norm_rows};
      std::vector<model::PieceResult> result = runner.run(piece);
      gatherer.add_rows(static_cast<int64_t>(first), static_cast<int64_t>(count), result.at(0).norm_rows);
    }
    return gatherer.finish();
  }

  static engine::EngineOptions engine_options(int32_t parallel, int32_t decision_workers = 0) {
    engine::EngineOptions options;
    options.parallel = parallel;
    options.decision_workers = decision_workers;
    options.context = 4096;
    options.prefill_chunk = 64;
    options.step_token_budget = 256;
    return options;
  }

  static engine::Request decide_request(const Encoding& encoding) {
    engine::Request request;
    request.kind = engine::RequestKind::decide;
    request.prompt = encoding.ids;
    request.decision = std::make_shared<HeadInputGatherer>(head_, *model_, encoding);
    return request;
  }

  static std::unique_ptr<model::Model> model_;
  static std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  static std::shared_ptr<const JointHead> head_;
};
std::unique_ptr<model::Model> DecisionEndToEnd::model_;
std::unique_ptr<tokenizer::Tokenizer> DecisionEndToEnd::tokenizer_;
std::shared_ptr<const JointHead> DecisionEndToEnd::head_;

// Every request the goldens ran through transformers. "Equal decision": the golden's top option, unless its lead
// over the runner-up is within 2 * 1e-4 (then |dp| <= 1e-4 allows either, and either is taken); the goldens' closest
// race is 2.8e-4, so in practice every top option must match. Rounded numbers may differ by one unit of the fourth
// decimal where the raw value sits by a rounding boundary; they must stay within 1e-4 + one unit.
TEST_F(DecisionEndToEnd, EveryGoldenDecisionOnTheDemoModel) {
  const auto started = std::chrono::steady_clock::now();
  int requests = 0, questions = 0, near_ties = 0;
  double worst = 0;
  for (const auto& golden : decision_goldens("demo").at("cases")) {
    if (!golden.value("forward", false)) continue;
    const std::string name = golden.at("name");
    SCOPED_TRACE(name);
    const DecisionRequest request = request_of(golden);
    const Encoding encoding = encode_decision(*tokenizer_, request, golden.at("max_length"));
    ASSERT_EQ(encoding.ids, golden.at("encoding").at("ids").get<std::vector<int32_t>>());
    const std::vector<float> logits = decide_directly(encoding, requests % 2 == 0 ? 256 : 64);
    const std::vector<std::vector<float>> p = question_probabilities(request, logits);
    const Json answers = answers_json(request, p, logits);
    const nlohmann::json& results = golden.at("results");
    for (size_t i = 0; i < request.questions.size(); ++i) {
      const Question& question = request.questions[i];
      const std::vector<double> want = results.at(i).at("probabilities").get<std::vector<double>>();
      ASSERT_EQ(p[i].size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        worst = std::max(worst, std::fabs(p[i][k] - want[k]));
        EXPECT_LE(std::fabs(p[i][k] - want[k]), kTolerance) << question.id << " option " << question.options[k].id;
      }
      const nlohmann::json& golden_answer = golden.at("answers").at(question.id);
      const Json& answer = answers.at(question.id);
      if (question.type == QuestionType::choice) {
        std::vector<double> sorted = want;
        std::sort(sorted.rbegin(), sorted.rend());
        if (sorted[0] - sorted[1] > 2 * kTolerance) {
          EXPECT_EQ(answer.at("choice"), golden_answer.at("choice")) << question.id;
        } else {
          ++near_ties;
          const double chosen =
              golden.at("answers_raw").at(question.id).at("probabilities").at(answer.at("choice").get<std::string>());
          EXPECT_GE(chosen, sorted[0] - 2 * kTolerance) << question.id;
        }
      }
      for (const char* field : {"noul", "score", "confidence"}) {
        if (!golden_answer.contains(field)) continue;
        // A score moves by at most sum(k |dp_k|).
        const double bound = field == std::string("score")
                                 ? kTolerance * static_cast<double>(want.size() * (want.size() - 1) / 2)
                                 : kTolerance;
        EXPECT_LE(std::fabs(answer.at(field).get<double>() - golden_answer.at(field).get<double>()),
                  bound + 1e-4 + 1e-12)
            << question.id << "." << field;
      }
      ++questions;
    }
    ++requests;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("end to end: %d requests, %d questions, max |dp| %.3g, %d near-ties, %.1f s\n", requests, questions,
              worst, near_ties, seconds);
  EXPECT_GE(requests, 50);
}

// The first few requests that fit the engine's context, by id.
std::vector<Encoding> some_encodings(const tokenizer::Tokenizer& tokenizer, size_t count, int32_t max_tokens) {
  std::vector<Encoding> out;
  for (const auto& golden : decision_goldens("demo").at("cases")) {
    if (golden.at("expect") != "ok") continue;
    const DecisionRequest request =
        validate_decision_request(parse_decision_body(golden.at("body").get<std::string>()));
    Encoding encoding = encode_decision(tokenizer, request, golden.at("max_length"));
    if (static_cast<int32_t>(encoding.ids.size()) > max_tokens) continue;
    out.push_back(std::move(encoding));
    if (out.size() == count) break;
  }
  return out;
}

std::vector<float> logits_of(engine::RequestHandle& handle) {
  const engine::testing::Outcome outcome = engine::testing::drain(handle);
  EXPECT_EQ(outcome.finished_events, 1);
  EXPECT_TRUE(outcome.tokens.empty());  // a decision sends no tokens
  EXPECT_EQ(outcome.finished.reason, engine::FinishReason::stop) << outcome.finished.error;
  EXPECT_EQ(outcome.finished.completion_tokens, 0);
  return outcome.finished.decision_logits;
}

// Four decisions at once equal each alone, byte for byte, and equal the model's forward pass without the engine,
// whether their heads take turns on one worker or run side by side on several.
TEST_F(DecisionEndToEnd, FourConcurrentDecisionsEqualEachAlone) {
  const std::vector<Encoding> encodings = some_encodings(*tokenizer_, 4, 1200);
  ASSERT_EQ(encodings.size(), 4u);
  // Before any engine of this test holds the model's state slots.
  std::vector<std::vector<float>> direct;
  for (const Encoding& encoding : encodings) direct.push_back(decide_directly(encoding, 128));
  std::vector<std::vector<float>> alone;
  for (const Encoding& encoding : encodings) {
    engine::Engine engine(*model_, tokenizer_.get(), engine_options(1));
    alone.push_back(logits_of(*engine.submit(decide_request(encoding))));
  }
  for (const int32_t workers : {1, 2, 4}) {
    engine::Engine engine(*model_, tokenizer_.get(), engine_options(4, workers));
    std::vector<std::shared_ptr<engine::RequestHandle>> handles;
    for (const Encoding& encoding : encodings) handles.push_back(engine.submit(decide_request(encoding)));
    for (size_t i = 0; i < encodings.size(); ++i) {
      const std::vector<float> together = logits_of(*handles[i]);
      ASSERT_EQ(together.size(), alone[i].size());
      EXPECT_EQ(std::memcmp(together.data(), alone[i].data(), together.size() * sizeof(float)), 0)
          << "request " << i << ", " << workers << " workers";
      EXPECT_EQ(together, direct[i]) << "request " << i << ", " << workers << " workers";
    }
  }
}

// A chat reply is the same, token for token, with and without decisions in the same steps; and the decisions beside
// it equal the same decisions alone.
TEST_F(DecisionEndToEnd, ChatIsIdenticalWithAndWithoutDecisionsBesideIt) {
  const std::vector<Encoding> encodings = some_encodings(*tokenizer_, 3, 1200);
  ASSERT_EQ(encodings.size(), 3u);
  const std::vector<int32_t> chat_prompt = tokenizer_->encode(
      "<|im_start|>user\nWrite two sentences about the sea, and one about a lighthouse.<|im_end|>\n"
      "<|im_start|>assistant\n");
  auto chat = [&](engine::Engine& engine) {
    engine::Request request = engine::testing::greedy_request(chat_prompt, 48);
    request.sampling.temperature = 0.8f;  // seeded sampling: every draw keyed by (seed, position)
    request.sampling.seed = 7;
    return engine.submit(std::move(request));
  };
  engine::Engine quiet(*model_, tokenizer_.get(), engine_options(4));
  const engine::testing::Outcome alone = engine::testing::drain(*chat(quiet));
  ASSERT_EQ(alone.tokens.size(), 48u);

  std::vector<std::vector<float>> decisions_alone;
  for (const Encoding& encoding : encodings)
    decisions_alone.push_back(logits_of(*quiet.submit(decide_request(encoding))));

  engine::Engine busy(*model_, tokenizer_.get(), engine_options(4));
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  handles.push_back(busy.submit(decide_request(encodings[0])));
  const auto chat_handle = chat(busy);
  handles.push_back(busy.submit(decide_request(encodings[1])));
  handles.push_back(busy.submit(decide_request(encodings[2])));
  const engine::testing::Outcome beside = engine::testing::drain(*chat_handle);
  EXPECT_EQ(beside.tokens, alone.tokens);
  EXPECT_EQ(beside.text, alone.text);
  for (size_t i = 0; i < handles.size(); ++i) EXPECT_EQ(logits_of(*handles[i]), decisions_alone[i]) << i;
  EXPECT_GT(busy.stats().steps_total, 0);
}

// A decision cancelled mid-prefill ends as cancelled, frees its slot, and the slot serves the next one.
TEST_F(DecisionEndToEnd, ACancelledDecisionFreesItsSlot) {
  const std::vector<Encoding> encodings = some_encodings(*tokenizer_, 64, 4096);
  const Encoding* longest = &encodings.front();
  for (const Encoding& e : encodings)
    if (e.ids.size() > longest->ids.size()) longest = &e;
  ASSERT_GT(longest->ids.size(), 2000u);
  const Encoding& next = encodings.front();
  const std::vector<float> next_direct = decide_directly(next, 64);
  engine::EngineOptions options = engine_options(1);
  options.step_token_budget = 64;  // one chunk a step: the decision is still prefilling when it is cancelled
  engine::Engine engine(*model_, tokenizer_.get(), options);
  const auto handle = engine.submit(decide_request(*longest));
  for (int i = 0; i < 500 && engine.stats().prompt_tokens_total == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  handle->cancel();
  const engine::testing::Outcome outcome = engine::testing::drain(*handle);
  EXPECT_EQ(outcome.finished.reason, engine::FinishReason::cancelled);
  EXPECT_TRUE(outcome.finished.decision_logits.empty());
  EXPECT_LT(engine.stats().prompt_tokens_total, static_cast<int64_t>(longest->ids.size()));
  for (int i = 0; i < 500 && engine.stats().slots_free != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(engine.stats().slots_free, 1);
  EXPECT_EQ(engine.stats().requests_cancelled, 1);
  EXPECT_EQ(logits_of(*engine.submit(decide_request(next))), next_direct);
}

// The memory plan counts what decisions hold: the head's weights, a head memory row per position of every slot, and
// three more per position for each decision worker's running head (its attentions' scratch over the memory).
TEST_F(DecisionEndToEnd, TheMemoryPlanCountsDecisions) {
  engine::EngineOptions options = engine_options(3);
  options.decision_workers = 2;
  const engine::MemoryPlan without = engine::plan_memory(*model_, options);
  options.decision_head_bytes = head_->weight_bytes();
  options.decision_bytes_per_position = static_cast<size_t>(head_->config().width) * sizeof(float);
  const engine::MemoryPlan with = engine::plan_memory(*model_, options);
  EXPECT_EQ(with.decision_bytes, head_->weight_bytes() + (3u + 3u * 2u) * 4096u * 64u * sizeof(float));
  options.decision_workers = 3;
  EXPECT_EQ(engine::plan_memory(*model_, options).decision_bytes,
            head_->weight_bytes() + (3u + 3u * 3u) * 4096u * 64u * sizeof(float));
  options.decision_workers = 2;
  EXPECT_EQ(with.total_bytes, without.total_bytes + with.decision_bytes);
  EXPECT_NE(with.describe().find("decisions"), std::string::npos);
  options.memory_limit_bytes = without.total_bytes + 1;  // fits without decisions, not with them
  EXPECT_THROW(engine::Engine(*model_, tokenizer_.get(), options), Error);
}

// The engine refuses a decide request it cannot run, before it waits for a slot.
TEST_F(DecisionEndToEnd, TheEngineRefusesBrokenDecideRequests) {
  engine::Engine engine(*model_, tokenizer_.get(), engine_options(1));
  engine::Request no_sink;
  no_sink.kind = engine::RequestKind::decide;
  no_sink.prompt = {1, 2, 3};
  try {
    engine.submit(no_sink);
    ADD_FAILURE() << "accepted";
  } catch (const engine::RequestInvalid& error) {
    EXPECT_EQ(error.code(), "invalid_decision");
  }
  const std::vector<Encoding> encodings = some_encodings(*tokenizer_, 1, 4096);
  engine::Request too_long = decide_request(encodings.front());
  too_long.prompt.resize(5000, too_long.prompt.back());
  try {
    engine.submit(too_long);
    ADD_FAILURE() << "accepted";
  } catch (const engine::RequestInvalid& error) {
    EXPECT_EQ(error.code(), "context_length_exceeded");
  }
}

}  // namespace
}  // namespace duet::decision
