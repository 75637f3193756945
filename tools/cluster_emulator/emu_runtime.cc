// The emulator's runtime: fibers (a hand-written x86-64 context switch), a scheduler that resumes fibers in a random
// order, and the blocking primitives. See emu_runtime.h. x86-64 Linux only.
#include "emu_runtime.h"

#include <signal.h>
#include <unistd.h>

#include <map>
#include <random>
#include <string>

asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
)");
extern "C" void emu_switch(void** from_sp, void* to_sp);

namespace {

constexpr int kClusterSize = 8;
constexpr size_t kStack = 256 * 1024;

enum Wait { kNone, kWarp, kBar, kCluster, kDone };

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;
  emu_uint3 tid{}, bid{};
  int block = 0, lane = 0, warp = 0;
  Wait wait = kNone;
  int wait_line = 0;
  uint64_t arrives = 0, waits = 0;  // cluster barrier halves done
  uint64_t cl_hash = 1469598103934665603ull, bar_hash = 1469598103934665603ull;
  std::vector<int> cl_lines;  // per cluster barrier half: the line of the last __syncthreads before it (+ arrive,
                              // - wait), for reports
  int last_line = 0;
  bool done = false;
};

struct WarpState {
  int count = 0;
  uint64_t gen = 0;
  uint64_t val[32];
  uint64_t res[32];
  int op[32], arg[32], line[32];
  unsigned mask[32];
  std::vector<Fiber*> waiters;
};
struct BlockState {
  int count = 0;
  uint64_t gen = 0;
  std::vector<Fiber*> waiters;
  std::vector<int> lines;
  unsigned char* smem = nullptr;
};
struct ClusterState {
  std::vector<int> arrived;                         // per phase
  std::map<uint64_t, std::vector<Fiber*>> waiters;  // per phase
  int exited = 0;
  std::vector<uint64_t> exited_arrives;  // arrive counts of exited fibers
};

std::vector<Fiber> fibers;
std::vector<WarpState> warps;
std::vector<BlockState> blocks;
std::vector<ClusterState> clusters;
std::vector<Fiber*> ready;
Fiber* cur = nullptr;
void* sched_sp = nullptr;
emu_uint3 grid_dim{};
int threads_per_block = 0;
size_t smem_bytes = 0;
const std::function<void()>* body = nullptr;
std::mt19937_64 sched_rng(12345);
std::vector<char*> stacks;
long warp_site_mismatch = 0, bar_site_mismatch = 0;
int failures = 0;
std::string first_warp_mismatch, first_bar_mismatch;

void hash_in(uint64_t& h, uint64_t v) {
  h ^= v;
  h *= 1099511628211ull;
}

void block_now(Wait w, int line) {
  cur->wait = w;
  cur->wait_line = line;
  emu_switch(&cur->sp, sched_sp);
}
void wake(Fiber* f) {
  f->wait = kNone;
  ready.push_back(f);
}

int cluster_threads() { return kClusterSize * threads_per_block; }

void complete_phase_if_ready(ClusterState& c, uint64_t phase) {
  int need = cluster_threads();
  for (uint64_t a : c.exited_arrives) {
    if (a <= phase) --need;  // exited without arriving at this phase
  }
  if (phase < c.arrived.size() && c.arrived[phase] >= need) {
    auto it = c.waiters.find(phase);
    if (it != c.waiters.end()) {
      for (Fiber* f : it->second) wake(f);
      c.waiters.erase(it);
    }
  }
}

void fiber_main() {
  (*body)();
  cur->done = true;
  cur->wait = kDone;
  ClusterState& c = clusters[cur->block / kClusterSize];
  c.exited_arrives.push_back(cur->arrives);
  for (auto& [phase, list] : std::map<uint64_t, std::vector<Fiber*>>(c.waiters)) complete_phase_if_ready(c, phase);
  emu_switch(&cur->sp, sched_sp);
  std::abort();
}

volatile uint64_t switches = 0;
void watchdog(int) {
  static uint64_t last = ~0ull;
  if (switches != last) {
    last = switches;
    alarm(30);
    return;
  }
  static const char msg[] = "emu: watchdog: a fiber ran for too long without blocking (an endless loop?)\n";
  write(2, msg, sizeof msg - 1);
  if (cur != nullptr)
    std::fprintf(stderr, "emu: running fiber block %d thread %d, last line %d\n", cur->block,
                 static_cast<int>(cur->tid.x), cur->wait_line);
  _exit(3);
}

}  // namespace

emu_uint3& emu_threadIdx() { return cur->tid; }
emu_uint3& emu_blockIdx() { return cur->bid; }
emu_uint3& emu_gridDim() { return grid_dim; }
unsigned emu_block_rank() { return static_cast<unsigned>(cur->block % kClusterSize); }
unsigned char* emu_smem() { return blocks[cur->block].smem; }
void* emu_map_rank(const void* p, int rank) {
  const unsigned char* q = static_cast<const unsigned char*>(p);
  const unsigned char* base = blocks[cur->block].smem;
  if (q < base || q >= base + smem_bytes) {
    std::fprintf(stderr, "emu: map_shared_rank of a pointer outside this block's shared memory\n");
    std::abort();
  }
  if (rank < 0 || rank >= kClusterSize) {
    std::fprintf(stderr, "emu: map_shared_rank rank %d\n", rank);
    std::abort();
  }
  const int target = cur->block / kClusterSize * kClusterSize + rank;
  if (fibers[static_cast<size_t>(target) * threads_per_block].done) {
    std::fprintf(stderr, "emu: block %d reads the shared memory of block %d, which has exited\n", cur->block, target);
    ++failures;
  }
  return blocks[target].smem + (q - base);
}

int emu_failures() { return failures; }

uint64_t emu_warp_op(int op, unsigned mask, uint64_t bits, int arg, int line) {
  WarpState& w = warps[cur->block * (threads_per_block / 32) + cur->warp];
  if (mask != 0xffffffffu) {
    std::fprintf(stderr, "emu: warp op with mask %x at line %d\n", mask, line);
  }
  const int l = cur->lane;
  w.val[l] = bits;
  w.op[l] = op;
  w.arg[l] = arg;
  w.line[l] = line;
  w.mask[l] = mask;
  const uint64_t gen = w.gen;
  if (++w.count == 32) {
    for (int k = 1; k < 32; ++k) {
      if (w.op[k] != w.op[0] || w.line[k] != w.line[0]) {
        if (warp_site_mismatch++ == 0) {
          first_warp_mismatch = "warp ops of one warp at different sites: lane 0 op " + std::to_string(w.op[0]) +
                                " line " + std::to_string(w.line[0]) + ", lane " + std::to_string(k) + " op " +
                                std::to_string(w.op[k]) + " line " + std::to_string(w.line[k]);
        }
        break;
      }
    }
    uint64_t ballot = 0;
    for (int k = 0; k < 32; ++k) ballot |= (w.val[k] != 0 ? 1ull : 0ull) << k;
    for (int k = 0; k < 32; ++k) {
      switch (w.op[k]) {
        case 0:
          w.res[k] = w.val[w.arg[k] & 31];
          break;
        case 1:
          w.res[k] = w.val[(k ^ w.arg[k]) & 31];
          break;
        case 2:
          w.res[k] = k >= w.arg[k] ? w.val[k - w.arg[k]] : w.val[k];
          break;
        case 3:
          w.res[k] = ballot;
          break;
        case 4:
          w.res[k] = ballot == 0xffffffffull ? 1 : 0;
          break;
        case 5: {
          uint64_t m = 0;
          for (int j = 0; j < 32; ++j) m |= (w.val[j] == w.val[k] ? 1ull : 0ull) << j;
          w.res[k] = m;
          break;
        }
      }
    }
    w.count = 0;
    ++w.gen;
    for (Fiber* f : w.waiters) wake(f);
    w.waiters.clear();
  } else {
    w.waiters.push_back(cur);
    block_now(kWarp, line);
    if (w.gen == gen) std::abort();
  }
  return w.res[l];
}

void emu_syncthreads(int line) {
  BlockState& b = blocks[cur->block];
  hash_in(cur->bar_hash, static_cast<uint64_t>(line));
  const int t = static_cast<int>(cur->tid.x);
  cur->last_line = line;
  b.lines[t] = line;
  if (++b.count == threads_per_block) {
    for (int k = 1; k < threads_per_block; ++k) {
      if (b.lines[k] != b.lines[0]) {
        if (bar_site_mismatch++ == 0) {
          first_bar_mismatch = "__syncthreads of one block at different lines: block " + std::to_string(cur->block) +
                               " thread 0 line " + std::to_string(b.lines[0]) + ", thread " + std::to_string(k) +
                               " line " + std::to_string(b.lines[k]);
        }
        break;
      }
    }
    b.count = 0;
    ++b.gen;
    for (Fiber* f : b.waiters) wake(f);
    b.waiters.clear();
  } else {
    b.waiters.push_back(cur);
    block_now(kBar, line);
  }
}

void emu_cluster_arrive(int line) {
  ClusterState& c = clusters[cur->block / kClusterSize];
  if (cur->arrives != cur->waits) {
    std::fprintf(stderr, "emu: block %d thread %u arrives twice without a wait (line %d)\n", cur->block, cur->tid.x,
                 line);
    std::abort();
  }
  const uint64_t phase = cur->arrives++;
  hash_in(cur->cl_hash, static_cast<uint64_t>(cur->last_line) * 2);
  cur->cl_lines.push_back(cur->last_line);
  if (c.arrived.size() <= phase) c.arrived.resize(phase + 1, 0);
  ++c.arrived[phase];
  complete_phase_if_ready(c, phase);
}

void emu_cluster_wait(int line) {
  ClusterState& c = clusters[cur->block / kClusterSize];
  if (cur->waits >= cur->arrives) {
    std::fprintf(stderr, "emu: block %d thread %u waits without an arrive (line %d)\n", cur->block, cur->tid.x, line);
    std::abort();
  }
  const uint64_t phase = cur->waits++;
  hash_in(cur->cl_hash, static_cast<uint64_t>(cur->last_line) * 2 + 1);
  cur->cl_lines.push_back(-cur->last_line);
  int need = cluster_threads();
  for (uint64_t a : c.exited_arrives) {
    if (a <= phase) --need;
  }
  if (phase < c.arrived.size() && c.arrived[phase] >= need) return;
  c.waiters[phase].push_back(cur);
  block_now(kCluster, line);
}

static void trampoline() { fiber_main(); }

// Returns after every fiber finished, or reports a deadlock and exits.
void emu_run_grid(int grid, int threads, size_t smem, const std::function<void()>& fn) {
  if (grid % kClusterSize != 0) {
    std::fprintf(stderr, "emu: grid %d is not a multiple of the cluster size\n", grid);
    std::abort();
  }
  const size_t n = static_cast<size_t>(grid) * threads;
  threads_per_block = threads;
  smem_bytes = smem;
  grid_dim = {static_cast<unsigned>(grid), 1, 1};
  body = &fn;
  fibers.assign(n, Fiber{});
  warps.assign(n / 32, WarpState{});
  blocks.assign(grid, BlockState{});
  clusters.assign(grid / kClusterSize, ClusterState{});
  static std::vector<unsigned char*> smems;
  while (smems.size() < static_cast<size_t>(grid))
    smems.push_back(static_cast<unsigned char*>(std::aligned_alloc(256, (smem + 255) / 256 * 256)));
  for (int b = 0; b < grid; ++b) {
    blocks[b].smem = smems[b];
    if (const char* e = std::getenv("EMU_SMEM_RANDOM")) {  // leftovers that differ from block to block
      std::mt19937_64 g(std::strtoull(e, nullptr, 10) * 1000003u + static_cast<unsigned>(b) + sched_rng());
      for (size_t k = 0; k < smem; ++k) smems[b][k] = static_cast<unsigned char>(g());
    } else {
      std::memset(smems[b], 0xff, smem);  // leftovers: NaN doubles and floats, all-ones integers
    }
    blocks[b].lines.assign(threads, 0);
  }
  while (stacks.size() < n) stacks.push_back(static_cast<char*>(std::aligned_alloc(64, kStack)));
  ready.clear();
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = fibers[i];
    f.block = static_cast<int>(i / threads);
    f.tid = {static_cast<unsigned>(i % threads), 0, 0};
    f.bid = {static_cast<unsigned>(f.block), 0, 0};
    f.lane = static_cast<int>(i % threads) & 31;
    f.warp = static_cast<int>(i % threads) >> 5;
    f.stack = stacks[i];
    uintptr_t top = reinterpret_cast<uintptr_t>(f.stack + kStack) & ~uintptr_t{15};
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                               // fake return address of the trampoline
    *--sp = reinterpret_cast<void*>(&trampoline);  // where emu_switch's ret goes
    for (int r = 0; r < 6; ++r) *--sp = nullptr;   // rbp rbx r12 r13 r14 r15
    f.sp = sp;
    ready.push_back(&f);
  }
  static bool armed = false;
  if (!armed) {
    armed = true;
    signal(SIGALRM, watchdog);
    alarm(30);
  }
  while (!ready.empty()) {
    const size_t k = sched_rng() % ready.size();
    std::swap(ready[k], ready.back());
    cur = ready.back();
    ready.pop_back();
    switches = switches + 1;
    emu_switch(&sched_sp, cur->sp);
  }
  cur = nullptr;
  // Deadlock?
  std::map<std::string, int> stuck;
  size_t not_done = 0;
  for (Fiber& f : fibers) {
    if (f.done) continue;
    ++not_done;
    const char* kind = f.wait == kWarp      ? "warp op"
                       : f.wait == kBar     ? "__syncthreads"
                       : f.wait == kCluster ? "cluster wait"
                                            : "?";
    ++stuck["block " + std::to_string(f.block) + ": " + kind + " at line " + std::to_string(f.wait_line) +
            " (arrives " + std::to_string(f.arrives) + ", waits " + std::to_string(f.waits) + ")"];
  }
  if (not_done != 0) {
    std::fprintf(stderr, "emu: DEADLOCK: %zu threads never finished:\n", not_done);
    for (auto& [what, count] : stuck) std::fprintf(stderr, "  %5d threads, %s\n", count, what.c_str());
  }
  // Every thread of a cluster must have made the same sequence of cluster barrier halves; every thread of a block
  // the same sequence of __syncthreads.
  for (int c = 0; c < grid / kClusterSize; ++c) {
    const Fiber& ref = fibers[static_cast<size_t>(c) * kClusterSize * threads];
    for (int b = c * kClusterSize; b < (c + 1) * kClusterSize; ++b) {
      for (int t = 0; t < threads; ++t) {
        const Fiber& f = fibers[static_cast<size_t>(b) * threads + t];
        if (f.cl_hash != ref.cl_hash) {
          std::fprintf(stderr,
                       "emu: CLUSTER SEQUENCE DIFFERS: block %d thread %d made %zu halves, block %d thread 0 %zu\n", b,
                       t, f.cl_lines.size(), ref.block, ref.cl_lines.size());
          size_t i = 0;
          while (i < f.cl_lines.size() && i < ref.cl_lines.size() && f.cl_lines[i] == ref.cl_lines[i]) ++i;
          std::fprintf(
              stderr,
              "     first difference at half %zu: after line %d vs after line %d (the last __syncthreads before it; "
              "negative: a wait)\n",
              i, i < f.cl_lines.size() ? f.cl_lines[i] : 0, i < ref.cl_lines.size() ? ref.cl_lines[i] : 0);
          ++failures;
          goto next_cluster;
        }
      }
    }
    for (int b = c * kClusterSize; b < (c + 1) * kClusterSize; ++b) {
      const Fiber& r0 = fibers[static_cast<size_t>(b) * threads];
      for (int t = 1; t < threads; ++t) {
        if (fibers[static_cast<size_t>(b) * threads + t].bar_hash != r0.bar_hash) {
          std::fprintf(stderr, "emu: BLOCK BARRIER SEQUENCE DIFFERS in block %d (thread %d vs 0)\n", b, t);
          ++failures;
          break;
        }
      }
    }
  next_cluster:;
  }
  failures += warp_site_mismatch != 0 || bar_site_mismatch != 0;
  if (warp_site_mismatch != 0)
    std::fprintf(stderr, "emu: %ld warp site mismatches; first: %s\n", warp_site_mismatch, first_warp_mismatch.c_str());
  if (bar_site_mismatch != 0)
    std::fprintf(stderr, "emu: %ld __syncthreads site mismatches; first: %s\n", bar_site_mismatch,
                 first_bar_mismatch.c_str());
  warp_site_mismatch = bar_site_mismatch = 0;
  if (not_done != 0) std::exit(2);
}
