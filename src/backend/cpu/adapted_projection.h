#pragma once
// A projection with its adapter on the CPU: y = x W^T for every row, then y += (x A^T) B^T for the rows of adapted
// pieces only. Those rows are gathered first, so a row of any other piece never enters an adapter product and its
// bytes are those of matmul() alone, with or without an adapter loaded.
#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace duet::backend::cpu {

// x: [rows, w.cols] fp32, y: [rows, w.rows] fp32; `pieces` say which rows are adapted (StepPiece::adapted).
void project(const float* x, int64_t rows, const Weight& w, const LoraFactors& lora, std::span<const StepPiece> pieces,
             float* y);

}  // namespace duet::backend::cpu
