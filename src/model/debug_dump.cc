#include "model/debug_dump.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "checkpoint/safetensors_writer.h"

namespace duet::model {

DebugDump::DebugDump() {
  if (const char* env = std::getenv("DUET_DUMP"); env != nullptr && *env != '\0') {
    folder_ = env;
    std::filesystem::create_directories(folder_);
  }
}

void DebugDump::begin_step(std::vector<int32_t> ids, std::vector<int32_t> positions) {
  ids_ = std::move(ids);
  positions_ = std::move(positions);
  tensors_.clear();
}

void DebugDump::add(backend::Backend& backend, const std::string& name, const backend::Activations& rows) {
  std::vector<float> values(static_cast<size_t>(rows.rows() * rows.width()));
  backend.read_rows(rows, 0, rows.rows(), values.data());
  width_ = rows.width();
  tensors_.emplace_back(name, std::move(values));
}

void DebugDump::end_step() {
  using checkpoint::DType;
  std::vector<checkpoint::TensorToWrite> out;
  const auto n = static_cast<int64_t>(ids_.size());
  out.push_back({"ids", DType::i32, {n}, checkpoint::as_bytes_of(ids_)});
  out.push_back({"positions", DType::i32, {n}, checkpoint::as_bytes_of(positions_)});
  for (const auto& [name, values] : tensors_)
    out.push_back({name, DType::f32, {n, width_}, checkpoint::as_bytes_of(values)});
  checkpoint::write_safetensors(fmt::format("{}/step{}.safetensors", folder_, step_++), out);
  tensors_.clear();
}

}  // namespace duet::model
