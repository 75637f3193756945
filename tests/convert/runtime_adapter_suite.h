#pragma once
// The runtime adapter served on a backend: the tiny base plus the adapter `duet adapter` extracts from the tiny merged
// checkpoint (tools/make_adapter_fixtures.py) must give the merged checkpoint's decisions within targets.md's gate
// (mean KL <= 1e-3, the same top option on >= 99% of questions), over the 85 questions of the tiny-mm-clef decision
// goldens asked about four states (340); the base alone and an adapter with shuffled factors are planted controls that
// must fail it. Chat never passes through the adapter: its logits and tokens are the same bytes with and without
// --clef, beside decisions and after them; four adapted decisions at once equal each alone. A damaged folder is refused
// by name. Included by runtime_adapter_test.cc (CPU) and tests/cuda/runtime_adapter_cuda_test.cc, after each defines
// kAdapterBackend, the backend every model of the suite is loaded on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "../decision/decision_fixtures.h"
#include "../engine/engine_harness.h"
#include "adapter_fixtures.h"
#include "backend/backend.h"
#include "base/bf16.h"
#include "checkpoint/json_file.h"
#include "decision/head_inputs.h"
#include "decision/joint_head.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/piece_runner.h"
#include "model/model.h"
#include "model/qwen35_model.h"

namespace duet::model {
namespace {

namespace format = checkpoint::adapter_format;
using testing::TempFolder;
namespace fs = std::filesystem;

constexpr double kMeanKlGate = 1e-3;  // targets.md: the adapter's gate
constexpr double kTopAgreementGate = 0.99;

struct Gate {
  double mean_kl = 0;
  double top_agreement = 0;
  int questions = 0;
  bool passes() const { return mean_kl <= kMeanKlGate && top_agreement >= kTopAgreementGate; }
};

class RuntimeAdapter : public ::testing::Test {
 protected:
  static bool on_cuda() { return kAdapterBackend == "cuda"; }
  // Empty when the suite's backend can run here; else why not (no GPU).
  static std::string unavailable() {
    return on_cuda() && !backend::cuda_backend_available() ? "no sm_90 CUDA device on this machine" : "";
  }
  void SetUp() override {
    if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "skipped, needs a GPU: " << why;
  }
  static void SetUpTestSuite() {
    if (!unavailable().empty()) return;
    adapter_dir_ = (fs::temp_directory_path() / ("duet_runtime_adapter_" + std::to_string(::getpid()))).string();
    fs::remove_all(adapter_dir_);
    testing::extract_tiny_adapter(adapter_dir_);
    base_ = Model::load(testing::tiny_base_dir(), kAdapterBackend);
    adapted_ = Model::load(testing::tiny_base_dir(), kAdapterBackend, adapter_dir_);
    merged_ = Model::load(testing::tiny_merged_dir(), kAdapterBackend);
    head_ = decision::JointHead::load(adapter_dir_, base_->config().hidden_size);
  }
  static void TearDownTestSuite() {
    if (adapter_dir_.empty()) return;
    base_.reset();
    adapted_.reset();
    merged_.reset();
    head_.reset();
    fs::remove_all(adapter_dir_);
  }

  static std::vector<decision::Encoding> golden_encodings() {
    std::vector<decision::Encoding> out;
    for (const auto& golden : testing::decision_goldens("tiny-mm-clef").at("cases"))
      out.push_back(testing::encoding_of(golden));
    return out;
  }

  // The gate's questions: the goldens' 85, and the same requests with three other states (the ids before the first
  // question's span drawn anew, seeded), 340 in all. 85 questions cannot show 99% (one is 1.2%); 340 can.
  static std::vector<decision::Encoding> gate_encodings() {
    std::vector<decision::Encoding> out;
    std::mt19937 rng(17);
    for (int variant = 0; variant < 4; ++variant)
      for (decision::Encoding encoding : golden_encodings()) {
        if (variant > 0) {
          std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(base_->config().vocab_size) - 1);
          for (int64_t i = 4; i < encoding.questions.front().span.begin; ++i) encoding.ids[i] = id(rng);
        }
        out.push_back(std::move(encoding));
      }
    return out;
  }

  // The decision's logits by the model's forward pass, prompt cut into `chunk` rows, through the adapter or not.
  static std::vector<float> decide(Model& model, const decision::Encoding& encoding, bool adapted, size_t chunk = 64) {
    decision::HeadInputGatherer gatherer(head_, model, encoding);
    engine::PieceRunner runner(model, 1, static_cast<int32_t>(encoding.ids.size()));
    const int32_t slot = runner.open();
    for (size_t first = 0; first < encoding.ids.size(); first += chunk) {
      const size_t count = std::min(chunk, encoding.ids.size() - first);
      const Piece piece{.slot = slot,
                        .tokens = std::span(encoding.ids).subspan(first, count),
                        .wants = RowOutput::norm_rows,
                        .adapted = adapted};
      auto result = runner.run(piece);
      gatherer.add_rows(static_cast<int64_t>(first), static_cast<int64_t>(count), result.at(0).norm_rows);
    }
    return gatherer.finish();
  }

  // KL(reference || candidate) per question (softmax in fp64) and top-option agreement, over every golden question.
  // Against the merged checkpoint on the suite's backend, or against `reference` when given.
  static Gate gate(Model& candidate, bool adapted, Model* reference = nullptr) {
    Gate g;
    double kl_sum = 0;
    int agree = 0;
    for (const decision::Encoding& encoding : gate_encodings()) {
      const std::vector<float> want = decide(reference ? *reference : *merged_, encoding, false);
      const std::vector<float> got = decide(candidate, encoding, adapted);
      size_t first = 0;
      for (const auto& question : encoding.questions) {
        const size_t n = question.options.size();
        auto softmax = [&](const std::vector<float>& logits) {
          std::vector<double> p(n);
          const double top = *std::max_element(logits.begin() + first, logits.begin() + first + n);
          double sum = 0;
          for (size_t k = 0; k < n; ++k) sum += p[k] = std::exp(logits[first + k] - top);
          for (double& x : p) x /= sum;
          return p;
        };
        const auto p = softmax(want), q = softmax(got);
        for (size_t k = 0; k < n; ++k) kl_sum += p[k] > 0 ? p[k] * std::log(p[k] / q[k]) : 0.0;
        agree += std::max_element(p.begin(), p.end()) - p.begin() == std::max_element(q.begin(), q.end()) - q.begin();
        ++g.questions;
        first += n;
      }
    }
    g.mean_kl = kl_sum / g.questions;
    g.top_agreement = static_cast<double>(agree) / g.questions;
    return g;
  }

  static engine::EngineOptions engine_options(int32_t parallel) {
    engine::EngineOptions options;
    options.parallel = parallel;
    options.context = 1024;
    options.prefill_chunk = 64;
    options.step_token_budget = 256;
    return options;
  }
  static engine::Request decide_request(Model& model, const decision::Encoding& encoding) {
    engine::Request request;
    request.kind = engine::RequestKind::decide;
    request.adapter = engine::AdapterUse::clef;
    request.prompt = encoding.ids;
    request.decision = std::make_shared<decision::HeadInputGatherer>(head_, model, encoding);
    return request;
  }
  static std::vector<float> logits_of(engine::RequestHandle& handle) {
    const auto outcome = engine::testing::drain(handle);
    EXPECT_EQ(outcome.finished.reason, engine::FinishReason::stop) << outcome.finished.error;
    return outcome.finished.decision_logits;
  }

  static std::string adapter_dir_;
  static std::unique_ptr<Model> base_, adapted_, merged_;

  static std::shared_ptr<const decision::JointHead> head_;
};
std::string RuntimeAdapter::adapter_dir_;
std::unique_ptr<Model> RuntimeAdapter::base_, RuntimeAdapter::adapted_, RuntimeAdapter::merged_;
std::shared_ptr<const decision::JointHead> RuntimeAdapter::head_;

TEST_F(RuntimeAdapter, DecisionsMatchTheMergedCheckpointWithinTheGate) {
  const Gate adapter = gate(*adapted_, true);
  const Gate base_alone = gate(*base_, false);
  std::printf("adapter vs merged: mean KL %.3g, top option %.4f of %d questions; base alone: mean KL %.3g, top %.4f\n",
              adapter.mean_kl, adapter.top_agreement, adapter.questions, base_alone.mean_kl, base_alone.top_agreement);
  EXPECT_EQ(adapter.questions, 4 * 85);
  // The control: without the adapter the same gate fails, so the gate sees the fine-tune.
  EXPECT_FALSE(base_alone.passes()) << base_alone.mean_kl << " " << base_alone.top_agreement;
  if (!on_cuda()) {
    EXPECT_TRUE(adapter.passes()) << adapter.mean_kl << " " << adapter.top_agreement;
    return;
  }
  // On CUDA the tiny random model's BF16 activations alone move its decisions past the gate's 1e-3 (measured on the
  // H200: the merged checkpoint on CUDA against itself on the CPU, mean KL 2.6e-3). So, as the rows gate does with
  // transformers BF16, the adapter is held to the floor: against the exact merged decisions (the merged checkpoint in
  // fp32 on the CPU), base + adapter on CUDA may be at most twice as far as the merged checkpoint on CUDA (an adapted
  // projection rounds twice where the merged one rounds once), with no more than one point less top-option agreement.
  // The 9B-shape gate (tools/gpu_adapter_gate.sh) measures the CUDA adapter against targets.md's figures as they are.
  auto merged_cpu = Model::load(testing::tiny_merged_dir(), "cpu");
  const Gate floor = gate(*merged_, false, merged_cpu.get());
  const Gate exact = gate(*adapted_, true, merged_cpu.get());
  std::printf(
      "against the merged checkpoint in fp32: merged on cuda mean KL %.3g, top %.4f; adapter on cuda %.3g, %.4f\n",
      floor.mean_kl, floor.top_agreement, exact.mean_kl, exact.top_agreement);
  EXPECT_LE(exact.mean_kl, 2 * floor.mean_kl);
  EXPECT_GE(exact.top_agreement, floor.top_agreement - 0.01);
}

// The floor the gate is measured against: the planted difference itself, in F32, as an adapter (A = V, B = c U). What
// it leaves is the merged checkpoint's own BF16 rounding (and its rounded norms); the extracted adapter must not be
// worse than twice that. On CUDA, whose adapter products take BF16 factors, the F32 adapter is refused by name.
TEST_F(RuntimeAdapter, ExtractedAdapterIsAsCloseAsThePlantedDifferenceItself) {
  TempFolder planted;
  testing::extract_tiny_adapter(planted.path(), testing::kPlantedRank);  // the manifest of rank-4 modules
  testing::rewrite_factors(planted.path(), [](std::vector<testing::OwnedTensor>& tensors) {
    const auto truth = checkpoint::Checkpoint::open_file(testing::planted_delta_file());
    for (auto& t : tensors) {
      const std::string key = t.name.substr(0, t.name.rfind('.'));
      const auto* source = truth.find(key + (t.name.ends_with(".lora_A") ? ".V" : ".U"));
      ASSERT_NE(source, nullptr) << t.name;
      t = {t.name, checkpoint::DType::f32, source->shape, {source->bytes.begin(), source->bytes.end()}};
    }
  });
  if (on_cuda()) {
    try {
      Model::load(testing::tiny_base_dir(), kAdapterBackend, planted.path());
      ADD_FAILURE() << "the cuda backend accepted F32 factors";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reads an adapter's factors as BF16"), std::string::npos) << e.what();
    }
    return;
  }
  auto exact = Model::load(testing::tiny_base_dir(), kAdapterBackend, planted.path());
  const Gate floor = gate(*exact, true);
  const Gate extracted = gate(*adapted_, true);
  std::printf("planted difference as an F32 adapter: mean KL %.3g, top %.4f; extracted: mean KL %.3g, top %.4f\n",
              floor.mean_kl, floor.top_agreement, extracted.mean_kl, extracted.top_agreement);
  EXPECT_LE(extracted.mean_kl, 2 * floor.mean_kl);
}

TEST_F(RuntimeAdapter, ControlShuffledFactorsFailTheGate) {
  TempFolder shuffled;
  fs::copy(adapter_dir_, shuffled.path());
  std::mt19937 rng(5);
  testing::rewrite_factors(shuffled.path(), [&](std::vector<testing::OwnedTensor>& tensors) {
    for (auto& t : tensors) {
      if (!t.name.ends_with(".lora_B")) continue;
      const int64_t rows = t.shape[0], row_bytes = t.shape[1] * 2;
      std::vector<int64_t> order(static_cast<size_t>(rows));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<uint8_t> out(t.bytes.size());
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(out.data() + r * row_bytes, t.bytes.data() + order[r] * row_bytes, row_bytes);
      t.bytes = out;
    }
  });
  auto model = Model::load(testing::tiny_base_dir(), kAdapterBackend, shuffled.path());
  const Gate g = gate(*model, true);
  std::printf("shuffled lora_B rows: mean KL %.3g, top option %.4f\n", g.mean_kl, g.top_agreement);
  EXPECT_FALSE(g.passes());
}

// In one step, a chat piece beside an adapted decision piece gets exactly the base model's logits, and the decision
// exactly its own alone; the adapted piece really differs from the base's.
TEST_F(RuntimeAdapter, ChatRowsInAMixedStepAreTheBaseBytes) {
  const auto encodings = golden_encodings();
  const std::vector<int32_t> chat(encodings[1].ids.begin(), encodings[1].ids.begin() + 100);
  const std::vector<int32_t> decision(encodings[0].ids.begin(), encodings[0].ids.begin() + 64);
  auto run = [&](Model& model, bool with_decision, bool adapted) {
    engine::PieceRunner runner(model, 2, 256);
    const int32_t chat_state = runner.open(), decision_state = runner.open();
    std::vector<Piece> pieces = {{.slot = chat_state, .tokens = chat, .wants = RowOutput::all_logits}};
    if (with_decision)
      pieces.push_back(
          {.slot = decision_state, .tokens = decision, .wants = RowOutput::all_logits, .adapted = adapted});
    return runner.run(pieces);
  };
  const auto base_alone = run(*base_, false, false);
  const auto mixed = run(*adapted_, true, true);
  const auto decision_alone = run(*adapted_, true, true);
  ASSERT_EQ(mixed[0].logits.size(), base_alone[0].logits.size());
  EXPECT_EQ(std::memcmp(mixed[0].logits.data(), base_alone[0].logits.data(), mixed[0].logits.size() * 4), 0);
  EXPECT_EQ(mixed[1].logits, decision_alone[1].logits);
  const auto unadapted = run(*adapted_, true, false);
  EXPECT_NE(mixed[1].logits, unadapted[1].logits);  // the adapter did act on the decision's rows
  EXPECT_EQ(unadapted[0].logits, base_alone[0].logits);
}

// Chat through the engine: the same tokens from the base alone, from the base with --clef, with adapted decisions in
// the same steps, and after them.
TEST_F(RuntimeAdapter, ChatIsIdenticalWithAndWithoutTheAdapterBesideAndAfterDecisions) {
  const auto encodings = golden_encodings();
  const std::vector<int32_t> prompt(encodings[2].ids.begin(), encodings[2].ids.begin() + 90);
  auto chat = [&](engine::Engine& engine) {
    engine::Request request = engine::testing::greedy_request(prompt, 40);
    request.sampling.temperature = 0.8f;
    request.sampling.seed = 11;
    return engine.submit(std::move(request));
  };
  engine::Engine plain(*base_, nullptr, engine_options(4));
  const auto reference = engine::testing::drain(*chat(plain));
  ASSERT_EQ(reference.tokens.size(), 40u);

  engine::Engine with_clef(*adapted_, nullptr, engine_options(4));
  EXPECT_EQ(engine::testing::drain(*chat(with_clef)).tokens, reference.tokens) << "with --clef, alone";
  std::vector<std::shared_ptr<engine::RequestHandle>> decisions;
  decisions.push_back(with_clef.submit(decide_request(*adapted_, encodings[0])));
  const auto beside = chat(with_clef);
  decisions.push_back(with_clef.submit(decide_request(*adapted_, encodings[1])));
  decisions.push_back(with_clef.submit(decide_request(*adapted_, encodings[3])));
  EXPECT_EQ(engine::testing::drain(*beside).tokens, reference.tokens) << "beside decisions";
  for (auto& d : decisions) EXPECT_FALSE(logits_of(*d).empty());
  EXPECT_EQ(engine::testing::drain(*chat(with_clef)).tokens, reference.tokens) << "after decisions";
}

TEST_F(RuntimeAdapter, FourConcurrentAdaptedDecisionsEqualEachAlone) {
  const auto encodings = golden_encodings();
  std::vector<std::vector<float>> direct;  // before any engine of this test holds the model's state slots
  for (size_t i = 0; i < 4; ++i) direct.push_back(decide(*adapted_, encodings[i], true, 128));
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < 4; ++i) {
    engine::Engine engine(*adapted_, nullptr, engine_options(1));
    alone.push_back(logits_of(*engine.submit(decide_request(*adapted_, encodings[i]))));
  }
  engine::Engine engine(*adapted_, nullptr, engine_options(4));
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (size_t i = 0; i < 4; ++i) handles.push_back(engine.submit(decide_request(*adapted_, encodings[i])));
  for (size_t i = 0; i < 4; ++i) {
    const auto together = logits_of(*handles[i]);
    ASSERT_EQ(together.size(), alone[i].size());
    EXPECT_EQ(std::memcmp(together.data(), alone[i].data(), together.size() * 4), 0) << i;
    EXPECT_EQ(together, direct[i]) << i;  // and the forward pass without the engine
  }
}

TEST_F(RuntimeAdapter, TheAdapterIsOnlyForAModelThatHasOne) {
  const auto encodings = golden_encodings();
  engine::PieceRunner runner(*base_, 1, 128);
  const int32_t state = runner.open();
  const Piece piece{.slot = state, .tokens = std::span(encodings[0].ids).first(8), .adapted = true};
  EXPECT_THROW(runner.run(piece), PieceRefused);
  EXPECT_EQ(runner.position(state), 0);
  engine::Engine engine(*base_, nullptr, engine_options(1));
  EXPECT_THROW(engine.submit(decide_request(*base_, encodings[0])), engine::RequestInvalid);
  EXPECT_TRUE(adapted_->has_adapter());
  EXPECT_FALSE(base_->has_adapter());
  EXPECT_GT(adapted_->adapter_bytes(), 0u);
}

// A copy of the extracted folder, damaged by `damage`, must be refused with a message holding `expected`.
void expect_refused(const std::string& adapter_dir, const std::function<void(const std::string&)>& damage,
                    const std::string& expected) {
  TempFolder copy;
  fs::copy(adapter_dir, copy.path());
  damage(copy.path());
  try {
    Model::load(testing::tiny_base_dir(), kAdapterBackend, copy.path());
    ADD_FAILURE() << "a damaged adapter was accepted; expected a refusal naming " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST_F(RuntimeAdapter, RefusesADamagedFolderByName) {
  // A flipped bit in the factors: the checksum.
  expect_refused(
      adapter_dir_,
      [](const std::string& dir) {
        std::fstream f(dir + "/adapter.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-3, std::ios::end);
        f.put('\x5a');
      },
      "adapter.safetensors: sha256");
  // A factor of the wrong shape (re-signed, so the shape check meets it).
  expect_refused(
      adapter_dir_,
      [](const std::string& dir) {
        testing::rewrite_factors(dir, [](std::vector<testing::OwnedTensor>& tensors) {
          for (auto& t : tensors)
            if (t.name == "layers.1.mlp.up_proj.lora_A") {
              t.shape = {t.shape[0], t.shape[1] / 2};
              t.bytes.resize(t.bytes.size() / 2);
            }
        });
      },
      "layers.1.mlp.up_proj.lora_A");
  // A module the base has no projection for.
  expect_refused(
      adapter_dir_,
      [](const std::string& dir) {
        testing::rewrite_factors(dir, [](std::vector<testing::OwnedTensor>& tensors) {
          tensors.push_back({"layers.0.linear_attn.frobnicate.lora_A",
                             checkpoint::DType::bf16,
                             {2, 64},
                             std::vector<uint8_t>(256, 0)});
        });
      },
      "layers.0.linear_attn.frobnicate.lora_A");
  // A GDN module on the attention layer (layer 3 is full attention).
  expect_refused(
      adapter_dir_,
      [](const std::string& dir) {
        testing::rewrite_factors(dir, [](std::vector<testing::OwnedTensor>& tensors) {
          tensors.push_back({"layers.3.linear_attn.out_proj.lora_A",
                             checkpoint::DType::bf16,
                             {2, 128},
                             std::vector<uint8_t>(512, 0)});
        });
      },
      "layers.3.linear_attn.out_proj.lora_A");
  // A factor without its partner.
  expect_refused(
      adapter_dir_,
      [](const std::string& dir) {
        testing::rewrite_factors(dir, [](std::vector<testing::OwnedTensor>& tensors) {
          std::erase_if(tensors, [](const auto& t) { return t.name == "layers.2.linear_attn.in_proj_z.lora_B"; });
        });
      },
      "layers.2.linear_attn.in_proj_z.lora_B: missing");
  // A missing checksum file, and a file it does not list.
  expect_refused(
      adapter_dir_, [](const std::string& dir) { fs::remove(dir + "/SHA256SUMS.json"); }, "SHA256SUMS.json: missing");
  expect_refused(
      adapter_dir_,
      [](const std::string& dir) {
        nlohmann::json sums = checkpoint::read_json_file(dir + "/SHA256SUMS.json");
        sums.erase("joint_head.safetensors");
        std::ofstream(dir + "/SHA256SUMS.json") << sums.dump();
      },
      "does not list joint_head.safetensors");
}

TEST_F(RuntimeAdapter, ChecksLmHeadRowsAgainstTheServedBase) {
  TempFolder with_rows;
  testing::extract_tiny_adapter(with_rows.path(), 256, convert::SvdMethod::automatic, true);
  EXPECT_TRUE(fs::exists(with_rows.file("lm_head_rows.safetensors")));
  EXPECT_TRUE(Model::load(testing::tiny_base_dir(), kAdapterBackend, with_rows.path())->has_adapter());
  expect_refused(
      with_rows.path(),
      [](const std::string& dir) {
        const std::string path = dir + "/lm_head_rows.safetensors";
        std::vector<uint8_t> bytes;
        checkpoint::DType dtype;
        std::vector<int64_t> shape;
        {
          const auto rows = checkpoint::Checkpoint::open_file(path);
          const auto* t = rows.find("lm_head.weight");
          bytes.assign(t->bytes.begin(), t->bytes.end());
          dtype = t->dtype, shape = t->shape;
        }
        bytes[100] ^= 0x10;  // another base's head
        const checkpoint::TensorToWrite t{"lm_head.weight", dtype, shape, bytes};
        checkpoint::write_safetensors(path, {&t, 1});
        format::sign_folder(dir);
      },
      "differs from the served base's output embedding");
}

// A backend that does not apply adapters: loading one is refused with its name, before
// any weight is made resident.
class NoAdapterBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return "no-adapter"; }
  backend::Weight resident(const backend::Weight&, WeightUse) override { fail("no weight may be made resident"); }
  size_t device_memory_bytes() const override { return 0; }
  std::unique_ptr<backend::StateStorage> new_state_storage(const backend::GdnShape&, int64_t, int64_t,
                                                           const backend::AttentionShape&, int64_t, int64_t,
                                                           int64_t) override {
    fail("unused");
  }
  size_t gdn_state_bytes(const backend::GdnShape&) const override { return 0; }
  size_t kv_page_bytes(const backend::AttentionShape&) const override { return 0; }
  void reserve_workspace(size_t) override {}
  size_t workspace_bytes() const override { return 0; }
  void begin_step(const backend::StepPlan&) override {}
  std::unique_ptr<backend::Activations> new_activations(int64_t, int64_t) override { fail("unused"); }
  void embed(const backend::Weight&, backend::Activations&) override {}
  void rms_norm(const backend::Activations&, const backend::Weight&, double, backend::Activations&) override {}
  void add(backend::Activations&, const backend::Activations&) override {}
  void gdn_mixer(const backend::GdnWeights&, const backend::GdnShape&, int64_t, const backend::Activations&,
                 backend::Activations&) override {}
  void attention_mixer(const backend::AttentionWeights&, const backend::AttentionShape&, int64_t,
                       const backend::Activations&, backend::Activations&) override {}
  void mlp(const backend::MlpWeights&, const backend::Activations&, backend::Activations&) override {}
  void lm_head(const backend::Weight&, const backend::Activations&, float*) override {}
  void sample(const backend::Weight&, const backend::Activations&, backend::SampledRow*) override {}
  void read_rows(const backend::Activations&, int64_t, int64_t, float*) override {}
};

TEST_F(RuntimeAdapter, ABackendThatDoesNotApplyAdaptersRefusesOneByName) {
  try {
    Qwen35Model model(Qwen35Config::load(testing::tiny_base_dir() + "/config.json"),
                      checkpoint::Checkpoint::open(testing::tiny_base_dir()), std::make_unique<NoAdapterBackend>(),
                      adapter_dir_);
    ADD_FAILURE() << "an adapter was given to a backend that does not apply it";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the no-adapter backend does not apply runtime adapters"), std::string::npos)
        << e.what();
  }
}

TEST_F(RuntimeAdapter, MemoryPlanCountsTheAdapter) {
  engine::Engine engine(*adapted_, nullptr, engine_options(2));
  const auto plan = engine::plan_memory(*adapted_, engine_options(2));
  EXPECT_EQ(plan.adapter_bytes, adapted_->adapter_bytes());
  EXPECT_NE(plan.describe().find(" + adapter "), std::string::npos) << plan.describe();
  EXPECT_EQ(engine::plan_memory(*base_, engine_options(2)).adapter_bytes, 0u);
}

}  // namespace
}  // namespace duet::model
