// `duet rows MODEL --prompts FILE --out DIR`: the final-norm rows of every prompt in FILE (JSON: {"prompts": [[ids],
// ...]}), each prompt prefilled alone in pieces of --chunk tokens, written as raw little-endian fp32 [tokens, hidden]
// to DIR/<i>.f32. The fidelity gate (tools/rows_gate.py) compares them with transformers' rows; the per-prompt
// timings on stderr are prefill speed at that length.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::cli {
namespace {

struct RowsOptions {
  std::string model_dir;
  std::string prompts_file;
  std::string out_dir;
  int chunk = 2048;
  int repeat = 1;  // prefills per prompt; rows are written once, every run is timed (the first warms up)
  std::string backend = "auto";
};

std::vector<std::vector<int32_t>> read_prompts(const std::string& path) {
  std::ifstream file(path);
  if (!file) fail("--prompts {}: cannot read it", path);
  nlohmann::json doc = nlohmann::json::parse(file, nullptr, false);
  if (!doc.is_object() || !doc.contains("prompts") || !doc["prompts"].is_array())
    fail("--prompts {}: expected a JSON object {{\"prompts\": [[ids], ...]}}", path);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : doc["prompts"]) {
    if (!p.is_array() || p.empty())
      fail("--prompts {}: prompt {} is not a non-empty array of ids", path, prompts.size());
    prompts.push_back(p.get<std::vector<int32_t>>());
  }
  return prompts;
}

void rows(const RowsOptions& options) {
  if (options.chunk < 64 || options.chunk % 64 != 0)
    fail("--chunk {}: must be a positive multiple of 64 (rows must not depend on the cut)", options.chunk);
  const auto prompts = read_prompts(options.prompts_file);
  std::filesystem::create_directories(options.out_dir);
  auto model = model::Model::load(options.model_dir, options.backend);
  const int64_t h = model->config().hidden_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& ids = prompts[i];
    std::vector<float> out;
    std::vector<double> times;
    for (int run = 0; run < std::max(options.repeat, 1); ++run) {
      out.clear();
      engine::PieceRunner runner(*model, 1, static_cast<int32_t>(ids.size()));
      const int32_t slot = runner.open();
      const auto start = std::chrono::steady_clock::now();
      for (size_t done = 0; done < ids.size(); done += static_cast<size_t>(options.chunk)) {
        const size_t n = std::min(static_cast<size_t>(options.chunk), ids.size() - done);
        auto result = runner.run(model::Piece{
            .slot = slot, .tokens = std::span(ids).subspan(done, n), .wants = model::RowOutput::norm_rows});
        out.insert(out.end(), result[0].norm_rows.begin(), result[0].norm_rows.end());
      }
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    const std::string path = fmt::format("{}/{}.f32", options.out_dir, i);
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
    if (!file) fail("{}: cannot write it", path);
    const double best = *std::min_element(times.begin(), times.end());
    std::fprintf(stderr, "%s\n",
                 fmt::format("prompt {}: {} tokens, {} rows of {} | prefill {:.1f} ms best of {} ({:.0f} tok/s), "
                             "first {:.1f} ms (rows read back every chunk)",
                             i, ids.size(), out.size() / static_cast<size_t>(h), h, best * 1e3, times.size(),
                             static_cast<double>(ids.size()) / best, times.front() * 1e3)
                     .c_str());
  }
}

}  // namespace

void add_rows_command(CLI::App& app) {
  auto options = std::make_shared<RowsOptions>();
  auto* cmd = app.add_subcommand("rows", "Final-norm rows of prompts (token ids) written as fp32, for fidelity gates");
  cmd->add_option("model", options->model_dir, "Model folder")->required();
  cmd->add_option("--prompts", options->prompts_file, "JSON file: {\"prompts\": [[ids], ...]}")->required();
  cmd->add_option("--out", options->out_dir, "Folder for <i>.f32, one per prompt")->required();
  cmd->add_option("--chunk", options->chunk, "Prefill piece size (multiple of 64)")->capture_default_str();
  cmd->add_option("--repeat", options->repeat, "Prefills per prompt, each timed")->capture_default_str();
  cmd->add_option("--backend", options->backend, "cpu, cuda, or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->callback([options] { rows(*options); });
}

}  // namespace duet::cli
