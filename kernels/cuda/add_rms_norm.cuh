// Fused residual add + RMSNorm on the GPU: sum = x + residual; y = rms_norm(sum) * w, one thread
// block per row, f32, in the operation order of kernels/cpu/rms_norm_cpu.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// x: [rows, dim] row stride ldx; residual: [rows, dim] stride ldr; w: [dim]; sum: [rows, dim]
// stride lds; y: [rows, dim] stride ldy. sum may alias x or residual (same stride); y must not
// alias sum. Device pointers; queued on `stream`. Returns the cudaError_t of the launch.
int add_rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* residual,
                 int64_t ldr, const float* w, float eps, float* sum, int64_t lds, float* y,
                 int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
