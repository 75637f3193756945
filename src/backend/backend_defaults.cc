// Backend methods with a refusal for a default: the ones only the MTP layer and speculative decoding use, which a
// backend gains when it runs them (the CPU and CUDA backends do).
#include "backend/backend.h"
#include "base/error.h"

namespace duet::backend {

namespace {
[[noreturn]] void lacks(const Backend& be, const char* what) {
  fail("the {} backend has no {} yet, which the MTP layer needs: run MTP with --backend cpu", be.name(), what);
}
}  // namespace

void Backend::write_rows(const float*, int64_t, int64_t, Activations&) { lacks(*this, "write_rows"); }
void Backend::concat(const Activations&, const Activations&, Activations&) { lacks(*this, "concat"); }
void Backend::project(const Weight&, const Activations&, Activations&) { lacks(*this, "project"); }

void StateStorage::rewind(int32_t, int64_t) {
  fail("the {} backend cannot take back verify rows yet (speculative decoding): draft with --backend cpu",
       owner() != nullptr ? owner()->name() : "this");
}

std::vector<std::byte> StateStorage::snapshot_bytes(int32_t) const {
  fail("the {} backend cannot read back a GDN snapshot's bytes", owner() != nullptr ? owner()->name() : "this");
}

std::unique_ptr<HostStateTier> StateStorage::new_host_tier(int64_t, int64_t) {
  fail("the {} backend has no host tier for the prompt cache: leave --prompt-cache-host-gib at 0",
       owner() != nullptr ? owner()->name() : "this");
}

void StateStorage::prepare_counts(int32_t) {
  fail("the {} backend's state storage keeps no penalty counts", owner() != nullptr ? owner()->name() : "this");
}

void StateStorage::update_counts(std::span<const CountsUpdate>) {
  fail("the {} backend's state storage keeps no penalty counts", owner() != nullptr ? owner()->name() : "this");
}

}  // namespace duet::backend
