#include "server/body_budget.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>

namespace duet::server {
namespace {

constexpr size_t kDefaultCeiling = size_t{4} << 30;

}  // namespace

void BodyBudget::trim_heap() { malloc_trim(0); }

BodyBudget::Lease& BodyBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    other.bytes_ = 0;
  }
  return *this;
}

bool BodyBudget::Lease::hold(size_t bytes) {
  if (budget_ == nullptr || bytes <= bytes_) return true;
  if (!budget_->take(bytes - bytes_)) return false;
  bytes_ = bytes;
  return true;
}

void BodyBudget::Lease::release() {
  if (budget_ != nullptr && bytes_ > 0) budget_->give_back(bytes_);
  bytes_ = 0;
}

bool BodyBudget::take(size_t bytes) {
  const size_t limit = limit_.load(std::memory_order_relaxed);
  size_t used = in_use_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit - std::min(used, limit)) return false;
  } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  size_t peak = peak_since_trim_.load(std::memory_order_relaxed);
  while (used + bytes > peak &&
         !peak_since_trim_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
  return true;
}

void BodyBudget::give_back(size_t bytes) {
  const size_t left = in_use_.fetch_sub(bytes, std::memory_order_relaxed) - bytes;
  // The burst is over: hand its memory back (one caller does it; a new burst meanwhile only makes it less useful).
  if (left == 0 && peak_since_trim_.load(std::memory_order_relaxed) >= kBurst &&
      peak_since_trim_.exchange(0, std::memory_order_relaxed) >= kBurst)
    return_memory_();
}

size_t default_buffered_body_bytes(size_t max_body_bytes, size_t planned_host_bytes) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  const size_t memory = pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
  const size_t left = memory - std::min(planned_host_bytes, memory);
  return std::max(std::min(left / 8, kDefaultCeiling), max_body_bytes);
}

}  // namespace duet::server
