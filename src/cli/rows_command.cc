// `duet rows MODEL --prompts FILE --out DIR`: the final-norm rows of every prompt in FILE (JSON: {"prompts": [[ids],
// ...]}), each prompt prefilled alone in pieces of --chunk tokens, written as raw little-endian fp32 [tokens, hidden]
// to DIR/<i>.f32. The fidelity gate (tools/rows_gate.py) compares them with transformers' rows; the per-prompt
// timings on stderr are prefill speed at that length.
// A prompt with images is an entry {"ids": [...], "images": ["file.png", ...]} (rows_images.h): its images read as
// `duet serve` reads them (the checkpoint's processor settings, the vision tower on the GPU with the model), each
// chunk given its tokens' 3-D positions and the rows of its image tokens, as the engine gives them
// (tools/vision_gate_9b.py compares them with transformers'). --image-controls also writes two planted faults of each
// such prompt, which a gate must tell from the truth: <i>.transposed.f32 (each image's rows in column-major token
// order) and <i>.positions1d.f32 (every token rotated at its index, as a text-only engine would).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/rows_images.h"
#include "engine/image_prompt.h"
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
  bool image_controls = false;
};

// What a prompt with images adds to each prefill chunk; none for a text prompt.
struct ImageFeed {
  const engine::ImagePrompt* prompt = nullptr;
  bool positions = true;  // false: the 1-D control (no 3-D positions)
};

// The prompt's rows; `seconds` (when given) is the time of its pieces alone, from after the sequence is opened.
std::vector<float> prefill(model::Model& model, const std::vector<int32_t>& ids, int chunk, const ImageFeed& images,
                           double* seconds = nullptr) {
  std::vector<float> out;
  engine::PieceRunner runner(model, 1, static_cast<int32_t>(ids.size()));
  const int32_t slot = runner.open();
  const auto start = std::chrono::steady_clock::now();
  for (size_t done = 0; done < ids.size(); done += static_cast<size_t>(chunk)) {
    const size_t n = std::min(static_cast<size_t>(chunk), ids.size() - done);
    model::Piece piece{.slot = slot, .tokens = std::span(ids).subspan(done, n), .wants = model::RowOutput::norm_rows};
    if (images.prompt != nullptr) {
      const auto start = static_cast<int32_t>(done), count = static_cast<int32_t>(n);
      piece.image_rows = images.prompt->rows(start, count);
      if (images.positions) piece.rope_positions = images.prompt->positions(start, count);
    }
    auto result = runner.run(piece);
    out.insert(out.end(), result[0].norm_rows.begin(), result[0].norm_rows.end());
  }
  if (seconds != nullptr) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

void write_rows(const std::string& path, const std::vector<float>& rows) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(float)));
  if (!file) fail("{}: cannot write it", path);
}

void rows(const RowsOptions& options) {
  if (options.chunk < 64 || options.chunk % 64 != 0)
    fail("--chunk {}: must be a positive multiple of 64 (rows must not depend on the cut)", options.chunk);
  const auto prompts = read_rows_prompts(options.prompts_file);
  std::filesystem::create_directories(options.out_dir);
  auto model = model::Model::load(options.model_dir, options.backend);
  const int64_t h = model->config().hidden_size;
  std::optional<RowsVision> vision;
  std::vector<std::vector<engine::PromptImage>> images(prompts.size());
  int64_t max_patches = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].images.empty()) continue;
    if (!vision) vision = RowsVision::load(options.model_dir, *model);
    try {
      images[i] = read_prompt_images(prompts[i], vision->processor,
                                     static_cast<int32_t>(vision->tower->config().image_token_id),
                                     vision->tower->patch_row_size());
    } catch (const Error& error) {
      fail("--prompts {}: prompt {}: {}", options.prompts_file, i, error.what());
    }
    for (const auto& image : images[i]) max_patches = std::max(max_patches, int64_t{image.t} * image.h * image.w);
  }
  if (vision) vision->use_device_for(*model, max_patches);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& ids = prompts[i].ids;
    std::optional<engine::ImagePrompt> image_prompt;
    std::vector<float> tower_rows;
    double tower_ms = 0;
    if (!images[i].empty()) {
      const model::VisionConfig& c = vision->tower->config();
      image_prompt.emplace(ids, images[i], static_cast<int32_t>(c.image_token_id),
                           static_cast<int32_t>(c.spatial_merge_size));
      const auto start = std::chrono::steady_clock::now();
      tower_rows = vision->rows(images[i]);
      tower_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      image_prompt->set_rows(tower_rows, h);
    }
    const ImageFeed feed{.prompt = image_prompt ? &*image_prompt : nullptr};
    std::vector<float> out;
    std::vector<double> times;
    for (int run = 0; run < std::max(options.repeat, 1); ++run) {
      double seconds = 0;
      out = prefill(*model, ids, options.chunk, feed, &seconds);
      times.push_back(seconds);
    }
    write_rows(fmt::format("{}/{}.f32", options.out_dir, i), out);
    const double best = *std::min_element(times.begin(), times.end());
    std::string image_note;
    if (image_prompt) {
      image_note = fmt::format(" | {} images, {} image tokens, rope delta {}, tower {:.1f} ms{}", images[i].size(),
                               image_prompt->image_tokens(), image_prompt->rope_delta(), tower_ms,
                               vision->tower->on_device() ? " (GPU)" : " (host)");
      if (options.image_controls) {
        const model::VisionConfig& c = vision->tower->config();
        engine::ImagePrompt transposed(ids, images[i], static_cast<int32_t>(c.image_token_id),
                                       static_cast<int32_t>(c.spatial_merge_size));
        transposed.set_rows(transpose_image_rows(tower_rows, images[i], h, static_cast<int32_t>(c.spatial_merge_size)),
                            h);
        write_rows(fmt::format("{}/{}.transposed.f32", options.out_dir, i),
                   prefill(*model, ids, options.chunk, {.prompt = &transposed}));
        write_rows(fmt::format("{}/{}.positions1d.f32", options.out_dir, i),
                   prefill(*model, ids, options.chunk, {.prompt = &*image_prompt, .positions = false}));
        image_note += "; controls written";
      }
    }
    std::fprintf(stderr, "%s\n",
                 fmt::format("prompt {}: {} tokens, {} rows of {} | prefill {:.1f} ms best of {} ({:.0f} tok/s), "
                             "first {:.1f} ms (rows read back every chunk){}",
                             i, ids.size(), out.size() / static_cast<size_t>(h), h, best * 1e3, times.size(),
                             static_cast<double>(ids.size()) / best, times.front() * 1e3, image_note)
                     .c_str());
  }
}

}  // namespace

void add_rows_command(CLI::App& app) {
  auto options = std::make_shared<RowsOptions>();
  auto* cmd = app.add_subcommand("rows", "Final-norm rows of prompts (token ids) written as fp32, for fidelity gates");
  cmd->add_option("model", options->model_dir, "Model folder")->required();
  cmd->add_option("--prompts", options->prompts_file,
                  "JSON file: {\"prompts\": [[ids] or {\"ids\": [...], \"images\": [\"file\", ...]}, ...]}")
      ->required();
  cmd->add_option("--out", options->out_dir, "Folder for <i>.f32, one per prompt")->required();
  cmd->add_option("--chunk", options->chunk, "Prefill piece size (multiple of 64)")->capture_default_str();
  cmd->add_option("--repeat", options->repeat, "Prefills per prompt, each timed")->capture_default_str();
  cmd->add_option("--backend", options->backend, "cpu, cuda, or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_flag("--image-controls", options->image_controls,
                "Also write <i>.transposed.f32 and <i>.positions1d.f32 for prompts with images (planted faults)");
  cmd->callback([options] { rows(*options); });
}

}  // namespace duet::cli
