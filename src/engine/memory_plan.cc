#include "engine/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "base/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/vision_model.h"

namespace duet::engine {

namespace {
// MiB for the big items, KiB where MiB would print 0.0 (a tiny model's KV page).
std::string mib(size_t bytes) {
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024.0);
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}
}  // namespace

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

int64_t planned_kv_pages(const model::Model& model, const EngineOptions& options) {
  const int64_t page = model.kv_page_positions();
  if (options.kv_cache_tokens > 0) return (options.kv_cache_tokens + page - 1) / page;
  return static_cast<int64_t>(options.parallel) * ((options.context + page - 1) / page);
}

int64_t verify_rows(const EngineOptions& options) { return 1 + options.draft.tokens; }

int64_t max_step_rows(const EngineOptions& options) {
  const int32_t drafts = options.draft.kind == DraftKind::none ? 0 : options.draft.tokens;
  return static_cast<int64_t>(options.step_token_budget) + options.prefill_chunk +
         static_cast<int64_t>(options.parallel) * (1 + drafts);
}

namespace {
struct CacheSplit {
  int64_t snapshots = 0, pages = 0;
};
// A quarter of a budget for GDN snapshots (at least one), the rest for the pages of the prefixes they resume; none
// when the budget holds less than one of each.
CacheSplit split_cache_budget(size_t budget, size_t snapshot, size_t page) {
  if (budget == 0 || page == 0 || budget < snapshot + page) return {};
  constexpr int64_t kMostSnapshots = 4096;  // each is a linear scan away from eviction
  const int64_t snapshots =
      snapshot == 0 ? 64 : std::clamp<int64_t>(static_cast<int64_t>(budget / 4 / snapshot), 1, kMostSnapshots);
  return {snapshots, static_cast<int64_t>((budget - static_cast<size_t>(snapshots) * snapshot) / page)};
}

// The host tier's: one snapshot the tier keeps free for swaps (prompt_cache_host.h: a bring_back's victim moves there
// before the entry brought back frees its own), and the device tier's split of the rest for its entries. Without it a
// budget whose quarter holds one snapshot (tiny models, where a page is small against a GDN state) would hold one entry
// and drop every victim of bringing it back. None when the budget holds less than two snapshots and a page.
CacheSplit split_host_budget(size_t budget, size_t snapshot, size_t page) {
  if (budget < 2 * snapshot + page) return {};
  const CacheSplit entries = split_cache_budget(budget - snapshot, snapshot, page);
  if (entries.snapshots == 0) return {};
  return {entries.snapshots + 1, entries.pages};
}

// With a decision head, each page may come with a decision's memory rows of its positions (a decision's kept
// prefix), and the budget counts them beside it. The host tier keeps no decision rows (prompt_cache_host.h), and
// only with a device tier to take entries from.
void plan_prompt_cache(const model::Model& model, const EngineOptions& options, MemoryPlan& plan) {
  const size_t snapshot = model.sequence_fixed_bytes(),
               rows = static_cast<size_t>(plan.kv_page_positions) * options.decision_bytes_per_position,
               page = plan.kv_page_bytes + rows;
  if (plan.kv_page_bytes == 0) return;
  const CacheSplit device = split_cache_budget(options.prompt_cache_bytes, snapshot, page);
  if (device.snapshots == 0) return;
  plan.prompt_cache_snapshots = device.snapshots;
  plan.prompt_cache_pages = device.pages;
  plan.prompt_cache_decision_bytes = static_cast<size_t>(plan.prompt_cache_pages) * rows;
  plan.prompt_cache_bytes =
      static_cast<size_t>(plan.prompt_cache_snapshots) * snapshot + static_cast<size_t>(plan.prompt_cache_pages) * page;
  const CacheSplit host = split_host_budget(options.prompt_cache_host_bytes, snapshot, model.kv_page_bytes());
  plan.prompt_cache_host_snapshots = host.snapshots;
  plan.prompt_cache_host_pages = host.pages;
  plan.prompt_cache_host_bytes =
      static_cast<size_t>(host.snapshots) * snapshot + static_cast<size_t>(host.pages) * model.kv_page_bytes();
}
}  // namespace

MemoryPlan plan_memory(const model::Model& model, const EngineOptions& options) {
  const model::Qwen35Config& config = model.config();
  MemoryPlan plan;
  plan.weight_bytes = model.weight_bytes();
  plan.context = options.context;
  plan.model_positions = config.max_position_embeddings;
  plan.adapter_bytes = model.adapter_bytes();
  plan.sequences = options.parallel;
  // The penalties' token counts of each slot, and with drafts what the backend keeps per slot to take back a verify
  // piece's rejected rows.
  plan.state_bytes_per_sequence =
      model.sequence_fixed_bytes() + model.sequence_counts_bytes() +
      (options.draft.kind == DraftKind::none ? 0 : model.sequence_rewind_bytes(verify_rows(options)));
  plan.kv_pages = planned_kv_pages(model, options);
  plan.kv_page_positions = model.kv_page_positions();
  // With MTP drafts, each page id also names a page of the MTP layer's K/V (Model::new_mtp_storage).
  plan.kv_page_bytes = model.kv_page_bytes() + (options.draft.kind == DraftKind::mtp ? model.mtp_kv_page_bytes() : 0);
  plan.state_pool_bytes = static_cast<size_t>(options.parallel) * plan.state_bytes_per_sequence +
                          static_cast<size_t>(plan.kv_pages) * plan.kv_page_bytes;
  plan_prompt_cache(model, options, plan);
  // One step's activations and logits, as the model counts them for its backend, plus the sampler's host copy of a
  // logits row per sampling piece.
  plan.workspace_bytes = model.workspace_bytes(max_step_rows(options)) + (static_cast<size_t>(options.parallel) + 1) *
                                                                             static_cast<size_t>(config.vocab_size) *
                                                                             sizeof(float);
  // Every slot's head memory M for a whole context, and each decision worker's running head: its attentions over M
  // hold up to three more [positions, width] matrices at once (a routing layer's normalized M, keys and values).
  const size_t memory_rows =
      options.decision_bytes_per_position == 0
          ? 0
          : static_cast<size_t>(options.parallel) + 3 * static_cast<size_t>(decision_worker_count(options));
  plan.decision_bytes = options.decision_head_bytes +
                        memory_rows * static_cast<size_t>(options.context) * options.decision_bytes_per_position;
  plan.on_device = model.device_memory_bytes() != 0;
  // The head and its inputs live on the host: they count against RAM, not against a GPU's memory. Its products run
  // on the GPU when the backend offers them, in buffers a whole context's rows wide.
  if (plan.on_device)
    plan.decision_device_bytes = options.decision_device_weight_bytes +
                                 static_cast<size_t>(options.context) * options.decision_device_bytes_per_position;
  if (options.vision) {
    plan.vision_bytes = options.vision->plan_bytes();
    plan.vision_on_device = options.vision->on_device();
  }
  plan.total_bytes = plan.weight_bytes + plan.adapter_bytes + plan.state_pool_bytes + plan.prompt_cache_bytes +
                     plan.workspace_bytes + (plan.on_device ? plan.decision_device_bytes : plan.decision_bytes) +
                     (plan.on_device ? 0 : plan.prompt_cache_host_bytes + plan.vision_bytes);
  if (plan.on_device) plan.host_limit_bytes = physical_memory_bytes();
  plan.limit_bytes = options.memory_limit_bytes != 0 ? options.memory_limit_bytes
                     : plan.on_device                ? model.device_memory_bytes()
                                                     : physical_memory_bytes();
  return plan;
}

std::string MemoryPlan::describe() const {
  return fmt::format(
      "context {} positions per sequence (model: {}); weights {}{} + state pool {} ({} sequences x {} GDN state and "
      "penalty counts + {} "
      "KV pages x {} = {} tokens){} + workspace ~{}{}{} = {} (limit {} of {}){}{}",
      context, model_positions > 0 ? std::to_string(model_positions) : std::string("no max_position_embeddings"),
      mib(weight_bytes), adapter_bytes == 0 ? std::string() : " + adapter " + mib(adapter_bytes), mib(state_pool_bytes),
      sequences, mib(state_bytes_per_sequence), kv_pages, mib(kv_page_bytes), kv_pages * kv_page_positions,
      prompt_cache_bytes == 0
          ? std::string(" + prompt cache off")
          : fmt::format(" + prompt cache {} ({} GDN snapshots + {} KV pages{})", mib(prompt_cache_bytes),
                        prompt_cache_snapshots, prompt_cache_pages,
                        prompt_cache_decision_bytes == 0 ? std::string()
                                                         : " with decision rows " + mib(prompt_cache_decision_bytes)) +
                (prompt_cache_host_bytes == 0
                     ? std::string()
                     : fmt::format(" + its host tier {} ({} GDN snapshots, one free for swaps, + {} KV pages{})",
                                   mib(prompt_cache_host_bytes), prompt_cache_host_snapshots, prompt_cache_host_pages,
                                   on_device ? ", in RAM" : "")),
      mib(workspace_bytes),
      on_device
          ? (decision_device_bytes == 0 ? std::string() : " + decision head products " + mib(decision_device_bytes))
          : (decision_bytes == 0 ? std::string() : " + decisions " + mib(decision_bytes)),
      vision_bytes == 0 || on_device ? std::string() : " + vision tower " + mib(vision_bytes), mib(total_bytes),
      mib(limit_bytes), on_device ? "GPU memory" : "RAM",
      decision_bytes == 0 || !on_device ? std::string() : "; decisions " + mib(decision_bytes) + " in RAM",
      vision_bytes == 0 || !on_device ? std::string()
      : vision_on_device ? "; vision tower " + mib(vision_bytes) + " on the GPU, taken before the limit was read"
                         : "; vision tower " + mib(vision_bytes) + " in RAM");
}

int32_t default_context(const model::Model& model, EngineOptions options) {
  const int64_t model_positions = model.config().max_position_embeddings;
  int64_t longest = model_positions > 0 ? model_positions : 4096;
  if (options.kv_cache_tokens > 0) longest = std::min(longest, options.kv_cache_tokens);
  longest = std::min<int64_t>(longest, std::numeric_limits<int32_t>::max());
  auto fits = [&](int64_t context) {
    options.context = static_cast<int32_t>(context);
    const MemoryPlan plan = plan_memory(model, options);
    return plan.limit_bytes == 0 || plan.total_bytes <= plan.limit_bytes;
  };
  if (fits(longest)) return static_cast<int32_t>(longest);
  // The plan grows with the context; find the most whole pages that fit.
  const int64_t page = model.kv_page_positions();
  int64_t low = 0, high = (longest + page - 1) / page;  // low pages fit (0: none known to), high do not
  while (high - low > 1) {
    const int64_t mid = (low + high) / 2;
    (fits(mid * page) ? low : high) = mid;
  }
  return static_cast<int32_t>(low > 0 ? low * page : longest);
}

void check_memory_plan(const MemoryPlan& plan) {
  if (plan.limit_bytes != 0 && plan.total_bytes > plan.limit_bytes) {
    fail("memory plan does not fit: {}; lower --parallel, --context or --kv-cache-tokens", plan.describe());
  }
  // On a GPU the host tier is RAM beside the decisions' (pinned: it cannot be swapped out).
  if (plan.host_limit_bytes != 0 && plan.prompt_cache_host_bytes + plan.decision_bytes > plan.host_limit_bytes) {
    fail("memory plan does not fit in RAM: {}; lower --prompt-cache-host-gib", plan.describe());
  }
}

}  // namespace duet::engine
