#include "engine/tower_runner.h"

#include <chrono>

namespace duet::engine {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

// One prompt's images [first, last]: the image under way and the rows of those done, in prompt order. The request's
// images stay alive with it (shared), so the pixels the run reads do too.
struct TowerRunner::Run {
  uint64_t sequence = 0;
  std::shared_ptr<const std::vector<PromptImage>> images;
  size_t first = 0, next = 0;  // the first image the prompt reads the rows of; the next to start
  std::unique_ptr<model::VisionRun> image;
  std::vector<float> rows;
  bool ready = false;  // every image done: the rows go to the sequence at the next advance()
};

TowerRunner::TowerRunner(const model::VisionModel& vision, int64_t hidden, double step_seconds)
    : vision_(vision), hidden_(hidden), step_seconds_(step_seconds) {}

TowerRunner::~TowerRunner() = default;

std::optional<uint64_t> TowerRunner::current() const { return run_ ? std::optional(run_->sequence) : std::nullopt; }

void TowerRunner::drop() { run_.reset(); }

TowerRunner::Progress TowerRunner::advance(Sequence& sequence, int32_t position, bool alone) {
  if (!run_ || run_->sequence != sequence.id()) {
    run_ = std::make_unique<Run>();
    run_->sequence = sequence.id();
    run_->images = sequence.request().images;
    run_->first = run_->next = sequence.images().first_needed_image(position);
  }
  Run& run = *run_;
  Progress progress;
  if (run.ready) {
    sequence.images().set_rows(std::move(run.rows), hidden_, run.first);
    run_.reset();
    return progress;
  }
  const auto started = Clock::now();
  double last_stage = 0;
  try {
    // Whole stages while the step's share lasts (judged by the last stage's time: a tower's blocks cost alike).
    while (progress.stages == 0 || alone || since(started) + last_stage <= step_seconds_) {
      if (!run.image) {
        if (run.next == run.images->size()) break;
        const PromptImage& image = (*run.images)[run.next++];
        run.image = vision_.start(image.pixel_values, {image.t, image.h, image.w});
      }
      const auto stage_started = Clock::now();
      run.image->run_stage();
      last_stage = since(stage_started);
      ++progress.stages;
      if (run.image->done()) {
        const std::vector<float> own = run.image->take_rows();
        run.rows.insert(run.rows.end(), own.begin(), own.end());
        run.image.reset();
        ++progress.images;
      }
    }
  } catch (...) {
    run_.reset();
    throw;
  }
  progress.seconds = since(started);
  if (!run.image && run.next == run.images->size()) {
    if (alone) {
      sequence.images().set_rows(std::move(run.rows), hidden_, run.first);
      run_.reset();
    } else {
      run.ready = true;  // its prefill starts next step, not on top of this step's tower share
    }
  }
  return progress;
}

}  // namespace duet::engine
