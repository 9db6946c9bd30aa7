// RMSNorm on the GPU: y = (x * (1 / sqrt(mean(x^2) + eps))) * w, one thread block per row, f32
// throughout, in the operation order of kernels/cpu/rms_norm_cpu.h (HF Llama/Qwen2).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// x: [rows, dim] row stride ldx; w: [dim]; y: [rows, dim] row stride ldy. y may equal x (with
// ldy == ldx). Device pointers; queued on `stream`. Returns the cudaError_t of the launch.
int rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w, float eps,
             float* y, int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
