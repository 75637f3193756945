// The joint head on transformers' fp32 final-norm rows against an independent fp32 PyTorch head written from the
// spec (tools/decision_reference.py): every stored request of the demo head and of the tiny-mm-clef head (the
// Clef-Flash checkpoint layout, another head shape, both scale clamps live) within 1e-5 in probability. Also:
// the inputs do not depend on how the rows were cut into chunks, permuting questions or options permutes the
// output, planted faults (a moved row, a wrong head tensor) fail the same check, and damaged heads are refused by
// name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "../checkpoint/damaged_copies.h"
#include "decision/head_inputs.h"
#include "decision/head_math.h"
#include "decision/joint_head.h"
#include "decision_fixtures.h"
#include "model/model.h"

namespace duet::decision {
namespace {

using testing::decision_goldens;
using testing::encoding_of;
using testing::golden_values;
using testing::question_probabilities;
using testing::rows_of;

constexpr double kProbabilityTolerance = 1e-5;

struct Backbone {
  std::unique_ptr<model::Model> model;
  std::shared_ptr<const JointHead> head;
};

const Backbone& backbone(const std::string& name) {
  static std::map<std::string, Backbone> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    const std::string dir = name == "demo" ? testing::demo_dir() : testing::tiny_clef_dir();
    Backbone b;
    b.model = model::Model::load(dir);
    b.head = JointHead::load(dir, b.model->config().hidden_size);
    it = loaded.emplace(name, std::move(b)).first;
  }
  return it->second;
}

// The head's inputs from stored rows, added `chunk` rows at a time.
HeadInputs gather(const JointHead& head, const std::shared_ptr<const JointHead>& owner, const model::Model& model,
                  const Encoding& encoding, const std::vector<float>& rows, int64_t chunk) {
  HeadInputGatherer gatherer(owner, model, encoding);
  const int64_t h = head.config().hidden_size, length = static_cast<int64_t>(encoding.ids.size());
  for (int64_t first = 0; first < length; first += chunk) {
    const int64_t count = std::min(chunk, length - first);
    gatherer.add_rows(first, count,
                      std::span(rows).subspan(static_cast<size_t>(first * h), static_cast<size_t>(count * h)));
  }
  EXPECT_TRUE(gatherer.complete());
  return gatherer.inputs();
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return std::isnan(worst) ? INFINITY : worst;
}

struct Comparison {
  double probability = 0;  // max |p - golden p|
  double logit = 0;        // max |logit - golden logit| / max(1, |golden logit|)
  int cases = 0;
};

// The head on every stored case of `file` (rows from transformers), against the golden head's numbers.
Comparison compare_with_goldens(const std::string& file, const JointHead& head,
                                const std::shared_ptr<const JointHead>& owner, const model::Model& model, int64_t chunk,
                                const std::function<void(std::vector<float>&, const Encoding&)>& plant = {}) {
  Comparison out;
  for (const auto& golden : decision_goldens(file).at("cases")) {
    const bool stored = file == "demo" ? golden.value("rows_stored", false) : true;
    if (!stored) continue;
    const nlohmann::json& encoded = file == "demo" ? golden.at("encoding") : golden;
    const Encoding encoding = encoding_of(encoded);
    std::vector<float> rows = rows_of(file, golden.at("name"));
    if (plant) plant(rows, encoding);
    const HeadOutput got = head.forward(gather(head, owner, model, encoding, rows, chunk));
    const nlohmann::json& results = golden.at("results");
    out.probability = std::max(out.probability, max_abs_difference(question_probabilities(got.logits, encoding),
                                                                   golden_values(results, "probabilities")));
    const std::vector<double> want = golden_values(results, "logits");
    for (size_t i = 0; i < want.size() && i < got.logits.size(); ++i)
      out.logit = std::max(out.logit, std::fabs(got.logits[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
    if (want.size() != got.logits.size()) out.logit = INFINITY;
    ++out.cases;
  }
  return out;
}

// Every stored request of `file` within 1e-5 in probability (and logits within 1e-5 relative).
void expect_head_matches_goldens(const std::string& file, int min_cases) {
  const Backbone& b = backbone(file);
  const Comparison c = compare_with_goldens(file, *b.head, b.head, *b.model, 64);
  EXPECT_GE(c.cases, min_cases);
  EXPECT_LE(c.probability, kProbabilityTolerance);
  EXPECT_LE(c.logit, 1e-5);
  std::printf("%s head: %d requests, max |dp| %.3g, max relative logit error %.3g\n", file.c_str(), c.cases,
              c.probability, c.logit);
}

TEST(JointHead, DemoHeadOnGoldenRows) { expect_head_matches_goldens("demo", 13); }

TEST(JointHead, TinyClefHeadOnGoldenRows) { expect_head_matches_goldens("tiny-mm-clef", 6); }

// The prior and joint terms too, on one request: a wrong term cannot hide behind a right sum.
TEST(JointHead, PriorAndJointTermsMatch) {
  const Backbone& b = backbone("demo");
  const nlohmann::json& golden = decision_goldens("demo").at("cases").at(1);
  ASSERT_TRUE(golden.value("rows_stored", false));
  const Encoding encoding = encoding_of(golden.at("encoding"));
  const HeadOutput got =
      b.head->forward(gather(*b.head, b.head, *b.model, encoding, rows_of("demo", golden.at("name")), 256));
  const auto close = [](const std::vector<float>& got, const std::vector<double>& want) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::fabs(got[i] - want[i]) > 1e-5 * std::max(1.0, std::fabs(want[i]))) return false;
    return true;
  };
  EXPECT_TRUE(close(got.prior, golden_values(golden.at("results"), "prior")));
  EXPECT_TRUE(close(got.joint, golden_values(golden.at("results"), "joint")));
}

// Cutting the rows into other chunks changes nothing, bit for bit: span sums are added in position order.
TEST(JointHead, InputsDoNotDependOnChunks) {
  const Backbone& b = backbone("demo");
  const nlohmann::json& golden = decision_goldens("demo").at("cases").at(0);
  const Encoding encoding = encoding_of(golden.at("encoding"));
  const std::vector<float> rows = rows_of("demo", golden.at("name"));
  const std::vector<float> whole =
      b.head->forward(gather(*b.head, b.head, *b.model, encoding, rows, static_cast<int64_t>(encoding.ids.size())))
          .logits;
  for (int64_t chunk : {1, 7, 64, 256}) {
    EXPECT_EQ(b.head->forward(gather(*b.head, b.head, *b.model, encoding, rows, chunk)).logits, whole)
        << "chunk " << chunk;
  }
}

// Planted faults must fail the check the real test makes: one row moved into an option span, and every row shifted
// by one position (the last row and every span read their neighbours).
TEST(JointHead, PlantedRowFaultsFailTheCheck) {
  const Backbone& b = backbone("demo");
  const int64_t h = b.head->config().hidden_size;
  const auto swap_rows = [h](std::vector<float>& rows, int64_t a, int64_t c) {
    std::swap_ranges(rows.begin() + a * h, rows.begin() + (a + 1) * h, rows.begin() + c * h);
  };
  const Comparison moved = compare_with_goldens("demo", *b.head, b.head, *b.model, 64,
                                                [&](std::vector<float>& rows, const Encoding& encoding) {
                                                  swap_rows(rows, 0, encoding.questions[0].options[0].begin);
                                                });
  EXPECT_GT(moved.probability, kProbabilityTolerance);
  const Comparison shifted = compare_with_goldens(
      "demo", *b.head, b.head, *b.model, 64,
      [&](std::vector<float>& rows, const Encoding&) { std::rotate(rows.begin(), rows.begin() + h, rows.end()); });
  EXPECT_GT(shifted.probability, kProbabilityTolerance);
}

// A copy of the demo model folder (model, tokenizer and head) in a temporary folder, removed at the end.
class DemoCopy {
 public:
  DemoCopy() : folder_(std::filesystem::temp_directory_path() / ("duet_head_" + std::to_string(getpid()))) {
    std::filesystem::remove_all(folder_);
    std::filesystem::copy(testing::demo_dir(), folder_);
  }
  ~DemoCopy() { std::filesystem::remove_all(folder_); }
  std::string folder() const { return folder_.string(); }

 private:
  std::filesystem::path folder_;
};

TEST(JointHead, PlantedWrongTensorFailsTheCheck) {
  const Backbone& b = backbone("demo");
  DemoCopy copy;
  // The q and k blocks of one attention's packed in-projection swapped: same names, shapes and dtype, wrong head.
  testing::DamagedCopy::write(copy.folder() + "/joint_head.safetensors", [&] {
    std::string bytes = testing::DamagedCopy::read(copy.folder() + "/joint_head.safetensors");
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(bytes[i]);
    const auto header = nlohmann::json::parse(bytes.substr(8, length));
    const auto& entry = header.at("layers.0.self_attn.in_proj_weight");
    const size_t begin = 8 + length + entry.at("data_offsets")[0].get<size_t>();
    const size_t block = (entry.at("data_offsets")[1].get<size_t>() - entry.at("data_offsets")[0].get<size_t>()) / 3;
    std::swap_ranges(bytes.begin() + static_cast<int64_t>(begin), bytes.begin() + static_cast<int64_t>(begin + block),
                     bytes.begin() + static_cast<int64_t>(begin + block));
    return bytes;
  }());
  std::shared_ptr<const JointHead> wrong = JointHead::load(copy.folder(), 128);
  const Comparison c = compare_with_goldens("demo", *wrong, wrong, *b.model, 64);
  EXPECT_GT(c.probability, kProbabilityTolerance);
}

// With H fixed the head is permutation-equivariant: questions in another order, and each question's options in
// another order, give the same logits, moved with them.
TEST(JointHead, PermutingQuestionsAndOptionsPermutesTheOutput) {
  const Backbone& b = backbone("demo");
  const nlohmann::json& golden = decision_goldens("demo").at("cases").at(1);  // 3 questions, 2 to 4 options
  ASSERT_EQ(golden.at("name"), "blog-shape");
  const Encoding encoding = encoding_of(golden.at("encoding"));
  const HeadInputs inputs = gather(*b.head, b.head, *b.model, encoding, rows_of("demo", golden.at("name")), 64);
  const std::vector<float> logits = b.head->forward(inputs).logits;
  const int64_t h = b.head->config().hidden_size;
  const auto Q = static_cast<int32_t>(inputs.question_types.size());

  // Option positions of each question, and where each question's options start in the output.
  std::vector<std::vector<int32_t>> options(static_cast<size_t>(Q));
  for (size_t o = 0; o < inputs.owner.size(); ++o) options[static_cast<size_t>(inputs.owner[o])].push_back(int32_t(o));
  std::vector<int32_t> question_order(static_cast<size_t>(Q));
  std::iota(question_order.rbegin(), question_order.rend(), 0);  // reversed
  HeadInputs permuted = inputs;
  permuted.question_means.clear();
  permuted.question_types.clear();
  permuted.owner.clear();
  permuted.option_means.clear();
  permuted.lexical_means.clear();
  std::vector<int32_t> source_of;  // permuted option -> original option
  const auto copy_row = [h](std::vector<float>& to, const std::vector<float>& from, int64_t row) {
    to.insert(to.end(), from.begin() + row * h, from.begin() + (row + 1) * h);
  };
  for (int32_t k = 0; k < Q; ++k) {
    const int32_t q = question_order[static_cast<size_t>(k)];
    copy_row(permuted.question_means, inputs.question_means, q);
    permuted.question_types.push_back(inputs.question_types[static_cast<size_t>(q)]);
    std::vector<int32_t> mine = options[static_cast<size_t>(q)];
    std::rotate(mine.begin(), mine.begin() + 1, mine.end());  // each question's options rotated by one
    for (int32_t o : mine) {
      copy_row(permuted.option_means, inputs.option_means, o);
      copy_row(permuted.lexical_means, inputs.lexical_means, o);
      permuted.owner.push_back(k);
      source_of.push_back(o);
    }
  }
  const std::vector<float> moved = b.head->forward(permuted).logits;
  ASSERT_EQ(moved.size(), logits.size());
  double worst = 0;
  for (size_t i = 0; i < moved.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(moved[i] - logits[static_cast<size_t>(source_of[i])])));
  EXPECT_LE(worst, 1e-5);
  // And the check can fail: without moving the logits back, they differ.
  double unmoved = 0;
  for (size_t i = 0; i < moved.size(); ++i)
    unmoved = std::max(unmoved, static_cast<double>(std::fabs(moved[i] - logits[i])));
  EXPECT_GT(unmoved, 1e-3);
}

// Damaged heads are refused before anything runs, naming the file and the tensor or key.
TEST(JointHead, DamagedHeadsAreRefusedByName) {
  const auto refused = [](const testing::DamagedCopy& copy, const std::string& expected) {
    try {
      JointHead::load(copy.folder(), 64);
      ADD_FAILURE() << "loaded; expected a refusal naming " << expected;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_header("joint_head.safetensors", [](nlohmann::json& header) {
      header["option_norm.weightx"] = header["option_norm.weight"];
      header.erase("option_norm.weight");
    });
    refused(copy, "option_norm.weight");  // missing (and an unknown one beside it)
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_header("joint_head.safetensors", [](nlohmann::json& header) {
      header["residual_scorer.3.bias"]["shape"] = {1, 1};
    });
    refused(copy, "residual_scorer.3.bias");  // wrong shape
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_header("joint_head.safetensors",
                     [](nlohmann::json& header) { header["hidden_norm.bias"]["dtype"] = "F16"; });
    refused(copy, "hidden_norm.bias");  // a dtype the head does not take
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_json("joint_head_config.json", [](nlohmann::json& config) { config["width"] = 48; });
    refused(copy, "memory_projection.weight");  // the file does not have the config's shapes
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_json("joint_head_config.json", [](nlohmann::json& config) { config["heads"] = 3; });
    refused(copy, "not divisible by heads");
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_json("joint_head_config.json", [](nlohmann::json& config) { config["dropout"] = 0.1; });
    refused(copy, "unknown key `dropout`");
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_json("joint_head_config.json", [](nlohmann::json& config) { config.erase("layers"); });
    refused(copy, "`layers` is missing");
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    copy.edit_json("joint_head_config.json", [](nlohmann::json& config) { config["hidden_size"] = 128; });
    try {
      JointHead::load(copy.folder(), 64);
      ADD_FAILURE() << "a head for rows of 128 loaded beside a backbone of 64";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("does not match the backbone's hidden_size 64"), std::string::npos)
          << error.what();
    }
  }
  {
    testing::DamagedCopy copy("tiny-mm-clef");
    std::filesystem::remove(copy.file("joint_head_config.json"));
    try {
      JointHead::present(copy.folder());
      ADD_FAILURE() << "a head without its config was taken";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("joint_head_config.json"), std::string::npos) << error.what();
    }
  }
  EXPECT_TRUE(JointHead::present(testing::tiny_clef_dir()));
  EXPECT_FALSE(JointHead::present(testing::tests_path("fixtures/models/tiny-mm")));
}

}  // namespace
}  // namespace duet::decision

namespace duet::decision {
namespace {

// What the head takes on a GPU (the memory plan counts it): every tensor of the demo head in fp32 and, per position,
// the widest host product's rows in and out or the device head's 4 w + h, whichever is more; the numbers as read
// from joint_head.safetensors's header by Python (334,660 elements in all; widest input residual_scorer.0's 256,
// widest output an in_proj's 192; w 64, h 128: 448 > 384).
TEST(JointHead, ProductMemoryIsItsTensorsInFp32AndTheWidestRows) {
  const auto head = JointHead::load(testing::demo_dir());
  const JointHead::ProductMemory memory = head->product_memory();
  EXPECT_EQ(memory.weight_bytes, 1338640u);
  EXPECT_EQ(memory.bytes_per_position, (256u + 192u) * sizeof(float));
}

}  // namespace
}  // namespace duet::decision
