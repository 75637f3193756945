// `duet serve BASE --clef ADAPTER` end to end over HTTP, on the demo model: a "merged" demo is made here (every
// projection plus a seeded rank-2 difference, rounded to BF16, with the demo's tokenizer and head), `duet adapter`
// extracts its adapter, and three servers run: the demo, the demo with --clef, and the merged demo alone. Chat from
// the --clef server is the plain demo's, byte for byte, before and after decisions; its decisions match the merged
// server's within targets.md's gate while the plain demo's do not (the control); a damaged adapter stops the server
// at start with the file's name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "../tests_dir.h"
#include "base/bf16.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "server_process.h"

namespace duet::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// |difference|_F / |W|_F per projection. Large enough that the plain demo's decisions miss the merged model's by
// more than the gate (the control): 5% did that on the random demo (mean KL 6.3e-3), but on the trained demo gave
// only 3.4e-4 (top option 100%), under the gate's 1e-3.
constexpr double kDeltaScale = 0.2;

bool is_projection(const std::string& name) {
  for (const char* module : {"in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj", "q_proj", "k_proj",
                             "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    if (name.ends_with(std::string(".") + module + ".weight")) return true;
  return false;
}

// The demo plus a rank-2 difference in every projection, in `dir`, with the demo's other files.
void make_merged_demo(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* file : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "preprocessor_config.json", "joint_head.safetensors", "joint_head_config.json"})
    fs::copy_file(fs::path(demo_model_dir()) / file, dir / file);
  const auto demo = checkpoint::Checkpoint::open_file(demo_model_dir() + "/model.safetensors");
  std::mt19937_64 rng(99);
  std::normal_distribution<double> normal;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<checkpoint::TensorToWrite> tensors;
  for (const std::string& name : demo.names()) {
    const auto* t = demo.find(name);
    bytes.emplace_back(t->bytes.begin(), t->bytes.end());
    if (is_projection(name)) {
      const int64_t rows = t->shape[0], cols = t->shape[1];
      auto* w = reinterpret_cast<uint16_t*>(bytes.back().data());
      std::vector<double> u(rows * 2), v(cols * 2), d(rows * cols, 0.0);
      for (double& x : u) x = normal(rng);
      for (double& x : v) x = normal(rng);
      double wn = 0, dn = 0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          d[i * cols + j] = u[i * 2] * v[j * 2] + u[i * 2 + 1] * v[j * 2 + 1];
          dn += d[i * cols + j] * d[i * cols + j];
          wn += static_cast<double>(bf16_to_float(w[i * cols + j])) * bf16_to_float(w[i * cols + j]);
        }
      const double c = kDeltaScale * std::sqrt(wn / dn);
      for (int64_t i = 0; i < rows * cols; ++i)
        w[i] = float_to_bf16(static_cast<float>(bf16_to_float(w[i]) + c * d[i]));
    }
    tensors.push_back({name, t->dtype, t->shape, {}});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = bytes[i];
  checkpoint::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

std::vector<std::string> decision_bodies(size_t count) {
  std::ifstream in(tests_dir() + "/fixtures/decisions/demo.json");
  const Json goldens = Json::parse(in);
  std::vector<std::string> bodies;
  for (const Json& c : goldens.at("cases")) {
    if (c.at("expect") != "ok" || c.at("encoding").at("ids").size() > 900) continue;
    Json body = Json::parse(c.at("body").get<std::string>());
    body["raw"] = true;
    bodies.push_back(body.dump());
    if (bodies.size() == count) break;
  }
  return bodies;
}

// Every option's unrounded probability, questions in order.
std::vector<std::vector<double>> probabilities(const ServerProcess& server, const std::string& body) {
  auto res = server.client().Post("/v1/systemone", body, "application/json");
  EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
  std::vector<std::vector<double>> out;
  if (!res || res->status != 200) return out;
  const Json reply = Json::parse(res->body);
  for (const auto& [id, answer] : reply.at("answers").items()) {
    std::vector<double> p;
    if (answer.contains("probabilities")) {
      for (const auto& [option, value] : answer.at("probabilities").items()) p.push_back(value.get<double>());
    } else {
      const double yes = answer.at("noul").get<double>();
      p = {yes, 1 - yes};
    }
    out.push_back(p);
  }
  return out;
}

std::string chat(const ServerProcess& server) {
  const Json body = {{"model", "demo"},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"messages", {{{"role", "user"}, {"content", "Tell me about lighthouses and the sea."}}}}};
  auto res = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
  return res ? Json::parse(res->body).at("choices").at(0).at("message").dump() : "";
}

struct GateResult {
  double mean_kl = 0;
  double top_agreement = 0;
  int questions = 0;
};
GateResult compare(const ServerProcess& reference, const ServerProcess& candidate,
                   const std::vector<std::string>& bodies) {
  GateResult g;
  double kl = 0;
  int agree = 0;
  for (const std::string& body : bodies) {
    const auto p = probabilities(reference, body), q = probabilities(candidate, body);
    if (p.empty() || p.size() != q.size()) {
      ADD_FAILURE() << "answers differ in shape";
      continue;
    }
    for (size_t i = 0; i < p.size(); ++i) {
      for (size_t k = 0; k < p[i].size(); ++k)
        kl += p[i][k] > 0 ? p[i][k] * std::log(p[i][k] / std::max(q[i][k], 1e-300)) : 0.0;
      agree += std::max_element(p[i].begin(), p[i].end()) - p[i].begin() ==
               std::max_element(q[i].begin(), q[i].end()) - q[i].begin();
      ++g.questions;
    }
  }
  g.mean_kl = kl / std::max(g.questions, 1);
  g.top_agreement = static_cast<double>(agree) / std::max(g.questions, 1);
  return g;
}

class ClefServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("duet-clef-e2e-" + std::to_string(getpid()));
    fs::remove_all(root_);
    make_merged_demo(root_ / "merged");
    const CommandResult made =
        run_command(std::string(DUET_BINARY) + " adapter --merged " + (root_ / "merged").string() + " --base " +
                    demo_model_dir() + " --out " + (root_ / "adapter").string() + " --rank 64 --lm-head-rows 2>&1");
    ASSERT_EQ(made.status, 0) << made.output;
    const std::vector<std::string> flags = {"--context", "1024", "--max-tokens",        "256", "--parallel", "4",
                                            "--backend", "cpu",  "--served-model-name", "demo"};
    auto with = [&](std::vector<std::string> extra) {
      extra.insert(extra.end(), flags.begin(), flags.end());
      return extra;
    };
    plain_ = std::make_unique<ServerProcess>(with({}));
    clef_ = std::make_unique<ServerProcess>(with({"--clef", (root_ / "adapter").string()}));
    merged_ = std::make_unique<ServerProcess>(with({}), (root_ / "merged").string());
  }
  static void TearDownTestSuite() {
    plain_.reset();
    clef_.reset();
    merged_.reset();
    fs::remove_all(root_);
  }
  static fs::path root_;
  static std::unique_ptr<ServerProcess> plain_, clef_, merged_;
};
fs::path ClefServe::root_;
std::unique_ptr<ServerProcess> ClefServe::plain_, ClefServe::clef_, ClefServe::merged_;

TEST_F(ClefServe, ChatIsTheBaseBeforeAndAfterDecisions) {
  const std::string reference = chat(*plain_);
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(chat(*clef_), reference);
  for (const std::string& body : decision_bodies(3)) probabilities(*clef_, body);
  EXPECT_EQ(chat(*clef_), reference);
  EXPECT_NE(chat(*merged_), reference);  // the control: the fine-tune does change chat
}

TEST_F(ClefServe, DecisionsMatchTheMergedModelWithinTheGate) {
  const auto bodies = decision_bodies(24);
  ASSERT_EQ(bodies.size(), 24u);
  const GateResult adapter = compare(*merged_, *clef_, bodies);
  const GateResult base = compare(*merged_, *plain_, bodies);
  std::printf("over HTTP, %d questions: --clef vs merged mean KL %.3g, top %.4f; plain demo vs merged %.3g, %.4f\n",
              adapter.questions, adapter.mean_kl, adapter.top_agreement, base.mean_kl, base.top_agreement);
  EXPECT_LE(adapter.mean_kl, 1e-3);
  EXPECT_GE(adapter.top_agreement, 0.99);
  EXPECT_TRUE(base.mean_kl > 1e-3 || base.top_agreement < 0.99) << "the control does not fail the gate";
}

TEST_F(ClefServe, TheStartLogShowsTheAdapterInTheMemoryPlan) {
  std::ifstream log(clef_->log_path());
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("runtime adapter"), std::string::npos) << text;
  EXPECT_NE(text.find(" + adapter "), std::string::npos) << text;
}

TEST_F(ClefServe, ADamagedAdapterStopsTheServerByName) {
  const fs::path damaged = root_ / "damaged";
  fs::copy(root_ / "adapter", damaged);
  {
    std::fstream f(damaged / "adapter.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x11');
  }
  const CommandResult result = run_command(std::string(DUET_BINARY) + " serve " + demo_model_dir() +
                                           " --backend cpu --port 0 --clef " + damaged.string() + " 2>&1");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.output.find("adapter.safetensors: sha256"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace duet::testing
