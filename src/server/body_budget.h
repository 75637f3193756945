#pragma once
// One budget for the request bodies all connections hold at once (--max-buffered-body-bytes). Each connection may
// read up to --max-body-bytes, and there may be thousands of connections: without a total, slow uploads alone could
// hold connections x max body bytes. A connection takes its body's bytes before it reads them (a declared length) or
// as they arrive (chunked); a body that does not fit is answered 503 with Retry-After, and the bytes come back when
// its request is done. When the last large burst is over, freed memory is handed back to the system.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace duet::server {

class BodyBudget {
 public:
  // A burst: this many bytes or more held at once. Once all of them are given back, `return_memory` runs.
  static constexpr size_t kBurst = 64u << 20;

  // By default malloc_trim(0): the parsed JSON of many small nodes is freed into the allocator's arenas, which keep
  // it unless asked to hand it back (a chunk still in use above it keeps the heap from shrinking by itself).
  explicit BodyBudget(size_t limit, std::function<void()> return_memory = trim_heap)
      : limit_(limit), return_memory_(std::move(return_memory)) {}
  BodyBudget(const BodyBudget&) = delete;
  BodyBudget& operator=(const BodyBudget&) = delete;

  size_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // A new limit for what is taken from now on (the default is resized once the model's memory plan is known); leases
  // keep what they hold.
  void set_limit(size_t limit) { limit_.store(limit, std::memory_order_relaxed); }
  size_t in_use() const { return in_use_.load(std::memory_order_relaxed); }

  // What one request holds; movable, given back when destroyed.
  class Lease {
   public:
    Lease() = default;
    explicit Lease(BodyBudget& budget) : budget_(&budget) {}
    Lease(Lease&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) { other.bytes_ = 0; }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { release(); }

    // Holds `bytes` in all (more, or the same); false, holding what it held, when the budget has no room for them.
    bool hold(size_t bytes);
    void release();
    size_t bytes() const { return bytes_; }

   private:
    BodyBudget* budget_ = nullptr;
    size_t bytes_ = 0;
  };

 private:
  static void trim_heap();
  bool take(size_t bytes);
  void give_back(size_t bytes);

  std::atomic<size_t> limit_;
  const std::function<void()> return_memory_;
  std::atomic<size_t> in_use_ = 0;
  std::atomic<size_t> peak_since_trim_ = 0;  // the most held since freed memory was last handed back
};

// --max-buffered-body-bytes 0: an eighth of the memory the model's plan leaves on the host (`planned_host_bytes`:
// the plan's total when it is in host memory, the CPU backend; 0 before it is known or when it is on a GPU), at most
// 4 GiB, and never below one body.
size_t default_buffered_body_bytes(size_t max_body_bytes, size_t planned_host_bytes = 0);

}  // namespace duet::server
