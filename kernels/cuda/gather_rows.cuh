// Row gather on the GPU: y[i] = x[index[i]], the last op of the Llama graph (picks the rows whose
// logits are wanted).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fault.cuh"

namespace sampan::cuda {

// Reason bit gather_rows reports to its FaultSink.
constexpr int32_t kGatherBadIndex = 1;

// x: [rows, n] row stride ldx; index: [m] i32 (device); y: [m, n] row stride ldy. An index
// outside [0, rows) never reads x: its output row is NaN and it is reported to `fault` (the CPU
// op throws before running; checking on the host would cost a stream synchronisation per step).
// Device pointers; queued on `stream`. Returns the cudaError_t of the launch.
int gather_rows(int64_t rows, int64_t n, const float* x, int64_t ldx, const int32_t* index,
                int64_t m, float* y, int64_t ldy, FaultSink fault, cudaStream_t stream);

}  // namespace sampan::cuda
