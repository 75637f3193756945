#pragma once
// Where the CUDA backend's activations live, for code beside the model that reads a step's rows on the device (a
// decision head: Backend::RowConsumer) instead of copying them to the host.
#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/device_step.h"

namespace duet::backend::cuda {

// The rows of activations the CUDA backend made: [x.rows(), x.width()] BF16, row-major.
const bf16* device_rows_of(const Activations& x);
// The stream the step's launches are ordered on: work put there after the final norm sees the step's rows and runs
// before the next step reuses their memory. Throws duet::Error for another backend, or while a step is being
// captured into a CUDA graph (a graphed step never carries a decision's rows).
cudaStream_t step_stream_of(Backend& backend);

}  // namespace duet::backend::cuda
