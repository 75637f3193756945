// The joint head on the GPU (decision/cuda/device_head.h) on transformers' fp32 final-norm rows: every stored
// request of the demo head and of the tiny-mm-clef head (another shape, both scale clamps live) within 1e-5 in
// probability of the independent fp32 PyTorch head (tools/decision_reference.py), as the host head is
// (tests/decision/head_test.cc), and within a few ulps of the host head on the same rows. Also: the result does not
// depend on how the rows were cut into chunks, nor on another decision's chunks and head running beside it, bit for
// bit; a planted fault (two rows of an option's span swapped with state rows) fails the same check. The attentions over
// the memory rows folded (AttentionFold) and unfolded: both meet the same bars, and they agree within 1e-5 with each
// other; the folded path without its value bias (a planted fault) does not.
#include "decision/cuda/device_head.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "../decision/decision_fixtures.h"
#include "cuda_test_util.h"
#include "decision/head_inputs.h"
#include "decision/head_math.h"
#include "decision/joint_head.h"
#include "model/model.h"

namespace duet::decision::cuda {
namespace {

using duet::testing::decision_goldens;
using duet::testing::encoding_of;
using duet::testing::golden_values;
using duet::testing::question_probabilities;
using duet::testing::rows_of;

constexpr double kProbabilityTolerance = 1e-5;

struct Loaded {
  std::unique_ptr<model::Model> model;  // CPU backbone: only its lm_head rows are read (the lexical means)
  std::shared_ptr<const JointHead> head;
  std::unique_ptr<DeviceJointHead> device;
};

const Loaded& loaded(const std::string& name) {
  static std::map<std::string, Loaded> all;
  auto it = all.find(name);
  if (it == all.end()) {
    const std::string dir = name == "demo" ? duet::testing::demo_dir() : duet::testing::tiny_clef_dir();
    Loaded l;
    l.model = model::Model::load(dir);
    l.head = JointHead::load(dir, l.model->config().hidden_size);
    l.device = std::make_unique<DeviceJointHead>(l.head, *l.model);
    it = all.emplace(name, std::move(l)).first;
  }
  return it->second;
}

// Host rows [L, h] fed to a device sink `chunk` rows at a time on `stream`.
void feed(DeviceHeadSink& sink, const std::vector<float>& rows, int64_t hidden, int64_t chunk, cudaStream_t stream) {
  const auto length = static_cast<int64_t>(rows.size()) / hidden;
  for (int64_t first = 0; first < length; first += chunk) {
    const int64_t count = std::min(chunk, length - first);
    float* device = nullptr;
    ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&device), count * hidden * sizeof(float), stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(device, rows.data() + first * hidden, count * hidden * sizeof(float),
                              cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    sink.take_f32_rows(device, count, stream);
    ASSERT_EQ(cudaFreeAsync(device, stream), cudaSuccess);
  }
}

std::shared_ptr<DeviceHeadSink> sink_for(const Loaded& l, const Encoding& encoding,
                                         AttentionFold fold = AttentionFold::by_cost) {
  auto sink = std::static_pointer_cast<DeviceHeadSink>(l.device->new_sink(encoding));
  sink->set_attention_fold(fold);
  return sink;
}

// `folded`, when given: how many attentions over the memory rows the run folded, of how many.
HeadOutput device_head(const Loaded& l, const Encoding& encoding, const std::vector<float>& rows, int64_t chunk,
                       AttentionFold fold = AttentionFold::by_cost, std::pair<int, int>* folded = nullptr) {
  auto sink = sink_for(l, encoding, fold);
  feed(*sink, rows, l.head->config().hidden_size, chunk, nullptr);
  EXPECT_TRUE(sink->complete());
  HeadOutput out = sink->run();
  if (folded != nullptr) *folded = sink->folded_attentions();
  return out;
}

HeadOutput host_head(const Loaded& l, const Encoding& encoding, const std::vector<float>& rows) {
  HeadInputGatherer gatherer(l.head, *l.model, encoding);
  gatherer.add_rows(0, static_cast<int64_t>(encoding.ids.size()), rows);
  return l.head->forward(gatherer.inputs());
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return std::isnan(worst) ? INFINITY : worst;
}
double max_relative(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(static_cast<double>(want[i]))));
  return std::isnan(worst) ? INFINITY : worst;
}

struct Comparison {
  double golden_probability = 0;  // max |p - golden p|
  double golden_logit = 0;        // max relative logit error against the golden head
  double host_logit = 0;          // max relative logit difference from the host head on the same rows
  int cases = 0;
};

Comparison compare(const std::string& file, const std::function<void(std::vector<float>&, const Encoding&)>& plant = {},
                   AttentionFold fold = AttentionFold::by_cost) {
  const Loaded& l = loaded(file);
  Comparison out;
  for (const auto& golden : decision_goldens(file).at("cases")) {
    if (file == "demo" && !golden.value("rows_stored", false)) continue;
    const Encoding encoding = encoding_of(file == "demo" ? golden.at("encoding") : golden);
    std::vector<float> rows = rows_of(file, golden.at("name"));
    if (plant) plant(rows, encoding);
    const HeadOutput got = device_head(l, encoding, rows, 64, fold);
    const HeadOutput host = host_head(l, encoding, rows);
    const nlohmann::json& results = golden.at("results");
    out.golden_probability =
        std::max(out.golden_probability,
                 max_difference(question_probabilities(got.logits, encoding), golden_values(results, "probabilities")));
    const std::vector<double> want = golden_values(results, "logits");
    out.golden_logit =
        std::max(out.golden_logit, max_relative(got.logits, std::vector<float>(want.begin(), want.end())));
    out.host_logit = std::max({out.host_logit, max_relative(got.logits, host.logits),
                               max_relative(got.prior, host.prior), max_relative(got.joint, host.joint)});
    ++out.cases;
  }
  return out;
}

const char* fold_name(AttentionFold fold) {
  switch (fold) {
    case AttentionFold::by_cost:
      return "by cost";
    case AttentionFold::never:
      return "never";
    case AttentionFold::always:
      return "always";
    case AttentionFold::always_without_value_bias:
      return "always, without the value bias (planted)";
  }
  return "?";
}

void expect_matches(const std::string& file, int min_cases, AttentionFold fold = AttentionFold::by_cost) {
  const Comparison c = compare(file, {}, fold);
  std::printf(
      "%s device head (fold: %s): %d requests, max |dp| %.3g against the golden head, max relative logit error %.3g; "
      "against the host head on the same rows %.3g\n",
      file.c_str(), fold_name(fold), c.cases, c.golden_probability, c.golden_logit, c.host_logit);
  EXPECT_GE(c.cases, min_cases);
  EXPECT_LE(c.golden_probability, kProbabilityTolerance);
  EXPECT_LE(c.golden_logit, 1e-5);
  // Each head is within 1e-5 of the golden one; the two may sit on either side of it.
  EXPECT_LE(c.host_logit, 2e-5);
}

TEST(DeviceHead, DemoHeadOnGoldenRows) {
  DUET_REQUIRE_GPU();
  expect_matches("demo", 13);
}

TEST(DeviceHead, TinyClefHeadOnGoldenRows) {
  DUET_REQUIRE_GPU();
  expect_matches("tiny-mm-clef", 6);
}

// The same bars with every attention over the memory rows folded, and with none (DUET_HEAD_FOLD=1 and =0).
TEST(DeviceHead, EitherFoldOnGoldenRows) {
  DUET_REQUIRE_GPU();
  for (AttentionFold fold : {AttentionFold::always, AttentionFold::never}) {
    expect_matches("demo", 13, fold);
    expect_matches("tiny-mm-clef", 6, fold);
  }
}

// The folded path against the unfolded one on the same rows: every option's probability within 1e-5, its logit,
// prior and joint terms within 1e-5 relative (to max(1, |x|)).
constexpr double kFoldTolerance = 1e-5;
struct FoldDifference {
  double probability = 0, logit = 0;
  int cases = 0;
  bool within() const { return cases > 0 && probability <= kFoldTolerance && logit <= kFoldTolerance; }
};

FoldDifference fold_difference(const std::string& file, AttentionFold fold) {
  const Loaded& l = loaded(file);
  const JointHeadConfig& config = l.head->config();
  const int attentions = static_cast<int>(config.routing_layers + config.layers);
  FoldDifference out;
  for (const auto& golden : decision_goldens(file).at("cases")) {
    if (file == "demo" && !golden.value("rows_stored", false)) continue;
    const Encoding encoding = encoding_of(file == "demo" ? golden.at("encoding") : golden);
    const std::vector<float> rows = rows_of(file, golden.at("name"));
    std::pair<int, int> folded, unfolded;
    const HeadOutput got = device_head(l, encoding, rows, 64, fold, &folded);
    const HeadOutput want = device_head(l, encoding, rows, 64, AttentionFold::never, &unfolded);
    EXPECT_EQ(folded, std::make_pair(attentions, attentions)) << golden.at("name");
    EXPECT_EQ(unfolded, std::make_pair(0, attentions)) << golden.at("name");
    out.probability = std::max(out.probability, max_difference(question_probabilities(got.logits, encoding),
                                                               question_probabilities(want.logits, encoding)));
    out.logit = std::max({out.logit, max_relative(got.logits, want.logits), max_relative(got.prior, want.prior),
                          max_relative(got.joint, want.joint)});
    ++out.cases;
  }
  std::printf("%s, fold %s against none: %d requests, max |dp| %.3g, max relative logit difference %.3g\n",
              file.c_str(), fold_name(fold), out.cases, out.probability, out.logit);
  return out;
}

TEST(DeviceHead, FoldedMatchesUnfolded) {
  DUET_REQUIRE_GPU();
  for (const std::string file : {"demo", "tiny-mm-clef"}) {
    const FoldDifference d = fold_difference(file, AttentionFold::always);
    EXPECT_GE(d.cases, 6) << file;
    EXPECT_LE(d.probability, kFoldTolerance) << file;
    EXPECT_LE(d.logit, kFoldTolerance) << file;
  }
}

// The control: the folded path with the value bias left out (out_h = W_v,h z, its b_v,h dropped) fails the same
// comparison on both heads.
TEST(DeviceHead, AFoldWithoutTheValueBiasFailsTheSameCheck) {
  DUET_REQUIRE_GPU();
  for (const std::string file : {"demo", "tiny-mm-clef"})
    EXPECT_FALSE(fold_difference(file, AttentionFold::always_without_value_bias).within()) << file;
}

// The rule (attention_folds): an attention over the memory rows is folded when its queries times the heads are fewer
// than the width. Both heads here have heads of 16 columns: fewer than 16 options fold the routing, fewer than 16
// questions the decoder's cross-attention. The stored requests take both sides (questions-64 neither, mixed-5 the
// decoder alone, the demo's requests everything).
TEST(DeviceHead, TheRuleFoldsFewQueries) {
  DUET_REQUIRE_GPU();
  std::set<std::pair<bool, bool>> seen;  // (routing folded, decoder folded)
  for (const std::string file : {"demo", "tiny-mm-clef"}) {
    const Loaded& l = loaded(file);
    const JointHeadConfig& config = l.head->config();
    for (const auto& golden : decision_goldens(file).at("cases")) {
      if (file == "demo" && !golden.value("rows_stored", false)) continue;
      const Encoding encoding = encoding_of(file == "demo" ? golden.at("encoding") : golden);
      int64_t options = 0;
      for (const auto& question : encoding.questions) options += static_cast<int64_t>(question.options.size());
      const auto questions = static_cast<int64_t>(encoding.questions.size());
      const bool routing = options * config.heads < config.width, decoder = questions * config.heads < config.width;
      EXPECT_EQ(routing, attention_folds(AttentionFold::by_cost, options, config.heads, config.width));
      std::pair<int, int> folded;
      device_head(l, encoding, rows_of(file, golden.at("name")), 64, AttentionFold::by_cost, &folded);
      const int want =
          (routing ? static_cast<int>(config.routing_layers) : 0) + (decoder ? static_cast<int>(config.layers) : 0);
      EXPECT_EQ(folded, std::make_pair(want, static_cast<int>(config.routing_layers + config.layers)))
          << file << " " << golden.at("name");
      seen.emplace(routing, decoder);
    }
  }
  EXPECT_TRUE(seen.contains({true, true}));
  EXPECT_TRUE(seen.contains({false, true}));
  EXPECT_TRUE(seen.contains({false, false}));
}

// The control: the first option's first row traded with the prompt's first row (a state or prefix row) moves the
// probabilities past the bar on some request.
TEST(DeviceHead, AMovedRowFailsTheSameCheck) {
  DUET_REQUIRE_GPU();
  const int64_t h = loaded("demo").head->config().hidden_size;
  const Comparison c = compare("demo", [h](std::vector<float>& rows, const Encoding& encoding) {
    const int32_t option_row = encoding.questions.front().options.front().begin;
    std::swap_ranges(rows.begin(), rows.begin() + h, rows.begin() + option_row * h);
  });
  EXPECT_GT(c.golden_probability, kProbabilityTolerance);
}

// Chunks of 7, 64 and the whole prompt give the same bits; so does a second decision's chunks interleaved with this
// one's on the same stream and its head run at the same time from another thread.
void expect_chunks_and_neighbours_change_no_bit(AttentionFold fold) {
  SCOPED_TRACE(fold_name(fold));
  const Loaded& l = loaded("demo");
  const int64_t h = l.head->config().hidden_size;
  std::vector<std::pair<Encoding, std::vector<float>>> cases;
  for (const auto& golden : decision_goldens("demo").at("cases"))
    if (golden.value("rows_stored", false))
      cases.emplace_back(encoding_of(golden.at("encoding")), rows_of("demo", golden.at("name")));
  ASSERT_GE(cases.size(), 2u);
  const auto& [a_encoding, a_rows] = cases[0];
  const auto& [b_encoding, b_rows] = cases[1];
  const HeadOutput alone = device_head(l, a_encoding, a_rows, 64, fold);
  const HeadOutput b_alone = device_head(l, b_encoding, b_rows, 64, fold);
  for (int64_t chunk : {int64_t{7}, int64_t{1} << 20}) {
    const HeadOutput cut = device_head(l, a_encoding, a_rows, chunk, fold);
    EXPECT_EQ(cut.logits, alone.logits) << "chunk " << chunk;
  }
  // Interleaved: a's and b's chunks alternate on one stream, then both heads run at once.
  auto a = sink_for(l, a_encoding, fold), b = sink_for(l, b_encoding, fold);
  const int64_t a_length = static_cast<int64_t>(a_rows.size()) / h, b_length = static_cast<int64_t>(b_rows.size()) / h;
  for (int64_t first = 0; first < std::max(a_length, b_length); first += 5) {
    const auto slice = [&](const std::vector<float>& rows, int64_t length) {
      const int64_t count = std::clamp<int64_t>(length - first, 0, 5);
      return std::vector<float>(rows.begin() + first * h, rows.begin() + (first + count) * h);
    };
    if (first < a_length) feed(*a, slice(a_rows, a_length), h, 5, nullptr);
    if (first < b_length) feed(*b, slice(b_rows, b_length), h, 5, nullptr);
  }
  HeadOutput a_out, b_out;
  std::thread other([&] { b_out = b->run(); });
  a_out = a->run();
  other.join();
  EXPECT_EQ(a_out.logits, alone.logits);
  EXPECT_EQ(b_out.logits, b_alone.logits);
  // The control: the two decisions differ, so equal outputs are not an artefact of reading one decision's buffers.
  EXPECT_NE(alone.logits, std::vector<float>(b_alone.logits.begin(), b_alone.logits.end()));
}

// The demo's requests fold every attention over the memory rows by the rule; both paths, each against itself.
TEST(DeviceHead, ChunksAndNeighboursChangeNoBit) {
  DUET_REQUIRE_GPU();
  expect_chunks_and_neighbours_change_no_bit(AttentionFold::always);
  expect_chunks_and_neighbours_change_no_bit(AttentionFold::never);
}

// The prompt cache (issue 18 item 4): a sink resumed from another's kept prefix (its memory rows before the first
// span, copied on the device) and fed only the rows after it gives the same bits as one fed every row. The control:
// resumed from the prefix of another decision's rows, it does not.
TEST(DeviceHead, AResumedPrefixChangesNoBit) {
  DUET_REQUIRE_GPU();
  const Loaded& l = loaded("demo");
  const int64_t h = l.head->config().hidden_size;
  std::vector<std::pair<Encoding, std::vector<float>>> cases;
  for (const auto& golden : decision_goldens("demo").at("cases"))
    if (golden.value("rows_stored", false)) {
      Encoding encoding = encoding_of(golden.at("encoding"));
      if (sink_for(l, encoding)->prefix_limit() >= 64)
        cases.emplace_back(std::move(encoding), rows_of("demo", golden.at("name")));
    }
  ASSERT_GE(cases.size(), 2u);
  // References, not a structured binding: clang 14 (the build's compiler, scripts/setup.sh) cannot capture one in a
  // lambda.
  const Encoding& encoding = cases[0].first;
  const std::vector<float>& rows = cases[0].second;
  const int64_t positions = sink_for(l, encoding)->prefix_limit() / 64 * 64;
  // The control's rows: another decision whose prefix differs in its ids (so in its rows) from this one's.
  const auto other = std::find_if(cases.begin() + 1, cases.end(), [&](const auto& c) {
    return sink_for(l, c.first)->prefix_limit() >= positions &&
           !std::equal(c.first.ids.begin(), c.first.ids.begin() + positions, encoding.ids.begin());
  });
  ASSERT_NE(other, cases.end());
  const auto& [other_encoding, other_rows] = *other;
  const HeadOutput alone = device_head(l, encoding, rows, 64);
  auto resumed_from = [&](const Encoding& kept_encoding, const std::vector<float>& kept_rows) {
    auto first = sink_for(l, kept_encoding);
    feed(*first, kept_rows, h, 64, nullptr);
    std::shared_ptr<const engine::DecisionPrefix> prefix = first->keep_prefix(positions);
    EXPECT_TRUE(prefix);
    first.reset();  // the prefix outlives the sink that kept it
    auto second = sink_for(l, encoding);
    second->resume_from(std::move(prefix));
    feed(*second, std::vector<float>(rows.begin() + positions * h, rows.end()), h, 64, nullptr);
    EXPECT_TRUE(second->complete());
    return second->run();
  };
  EXPECT_EQ(resumed_from(encoding, rows).logits, alone.logits);
  EXPECT_NE(resumed_from(other_encoding, other_rows).logits, alone.logits);
}

}  // namespace
}  // namespace duet::decision::cuda
