#pragma once
// The one owner of sequence state bookkeeping: which GDN slots are lent, which KV pages each sequence's table
// holds, how many references each page has, and how many pages each sequence may still take (its reservation).
// The memory itself is the backend's StateStorage; the model and backend only ever see {slot, page table,
// position} per piece.
//
// Pages are shared by reference count: a forked choice shares the full pages of the prompt it forked from, a prompt
// cache hit shares a cached prefix's pages, and the prompt cache itself holds references (retain / drop). A page
// is written only by the one sequence whose table holds it with a single reference (writable() checks this before a
// step), so a shared page is never written: full pages are shared, a page still being filled is copied.
//
// Reservations keep a running sequence from ever finding the pool empty: a slot is lent only when the pages it may
// still take fit in the free pages not already promised to others (free_pages() >= reserved_pages() always holds).
// Free slots and pages are handed out lowest id first, so placement is reproducible run to run.
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace duet::engine {

class BlockManager {
 public:
  BlockManager(int32_t slots, int64_t pages);

  // Pages that hold `positions` positions (64 to a page, backend::kKvPagePositions).
  static int64_t pages_for(int64_t positions);

  // Whether acquire(limit, shared) would succeed now: a free slot, and limit - shared.size() unpromised free pages.
  bool can_acquire(int64_t limit_pages, int64_t shared_pages = 0) const;
  // Lends the lowest free slot to a sequence that may hold up to `limit_pages` pages in all, the first of them
  // `shared` (a cached prefix: their references grow by one, its position becomes shared.size() * 64). Reserves
  // the rest. nullopt, with nothing changed, when can_acquire is false.
  std::optional<int32_t> acquire(int64_t limit_pages, std::span<const int32_t> shared = {});
  // Drops the slot's references (a page nobody else holds becomes free) and its reservation; the slot is free.
  void release(int32_t slot);

  // Grows the slot's table to hold `positions` positions: new pages from its reservation, past it from unpromised
  // free pages. Throws duet::Error, with nothing taken, when too few are free.
  void cover(int32_t slot, int64_t positions);
  // Throws unless the pages that positions [from, to) of the slot land in are held by it alone (never write a
  // shared page).
  void check_writable(int32_t slot, int64_t from, int64_t to) const;
  void advance(int32_t slot, int64_t positions) { slot_at(slot).position += positions; }
  // A fork: `to` (just acquired, empty) takes `from`'s position and shares its full pages; the page `from` is still
  // filling (if any) becomes a fresh page of `to`. Returns the (from page, to page) pairs whose contents must be
  // copied (at most one); the caller copies them and the GDN slot.
  std::vector<std::pair<int32_t, int32_t>> fork(int32_t from, int32_t to);

  // References held outside any slot (the prompt cache's): retain adds one to each page, drop removes one.
  void retain(std::span<const int32_t> pages);
  // `count` free pages nobody was promised (lowest first), each with one such reference (the prompt cache filling
  // them from its host tier); nullopt, with nothing taken, when too few are.
  std::optional<std::vector<int32_t>> take_unpromised(int64_t count);
  void drop(std::span<const int32_t> pages);

  const std::vector<int32_t>& table(int32_t slot) const { return slot_at(slot).table; }
  int64_t position(int32_t slot) const { return slot_at(slot).position; }
  int32_t references(int32_t page) const { return refs_.at(static_cast<size_t>(page)); }

  int32_t slots() const { return static_cast<int32_t>(slots_.size()); }
  int32_t free_slots() const;
  int64_t pages() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  int64_t reserved_pages() const { return reserved_; }  // promised to lent slots, not yet taken

 private:
  struct Slot {
    bool lent = false;
    std::vector<int32_t> table;  // page ids in position order
    int64_t position = 0;        // positions consumed
    int64_t reserved = 0;        // pages it may still take from the free list
  };
  Slot& slot_at(int32_t slot);
  const Slot& slot_at(int32_t slot) const;
  int32_t take_page();       // the lowest free page, one reference
  void unref(int32_t page);  // one reference less; free at none
  void append_shared(Slot& s, int32_t page);

  std::vector<Slot> slots_;
  std::vector<int32_t> refs_;  // per page
  std::set<int32_t> free_pages_;
  int64_t reserved_ = 0;
};

}  // namespace duet::engine
