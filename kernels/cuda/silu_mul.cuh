// SwiGLU activation on the GPU: y = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// gate, up, y: [rows, n] with row strides ldg, ldu, ldy. y may alias gate or up (same stride).
// Device pointers; queued on `stream`. Returns the cudaError_t of the launch.
int silu_mul(int64_t rows, int64_t n, const float* gate, int64_t ldg, const float* up,
             int64_t ldu, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
