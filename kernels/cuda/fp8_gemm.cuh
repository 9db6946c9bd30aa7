// The pieces around cuBLASLt's FP8 x FP8 product (sm_89+) for kF8E4M3 weights with f32
// activations (gemm.cuh):
//   1. each row of x (a token) is quantized to E4M3 with its own scale, computed on the GPU
//      (s_r = max_c |x_rc| / 448; no host round trip, so the call stays asynchronous);
//   2. cuBLASLt multiplies the E4M3 codes, with no scales of its own (a scale pointer must be
//      16-byte aligned, and a scalar could not hold per-row scales anyway);
//   3. fp8_scale_bias multiplies each output by its row's s_r and its column's weight scale and
//      adds the bias: y_rc = (sum_k x8_rk w8_ck) * s_r * ws_c + b_c, exact algebra.
// Error from step 1: E4M3 keeps 4 significant bits (2^-4 relative), and elements below
// 2^-6 * s_r are subnormal (absolute error up to 2^-10 * s_r). Non-finite elements of x are left
// out of the row's maximum; they saturate to +-448 * s_r (NaN stays NaN).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// x: [m, k] f32 row stride ldx. x8: [m, ld8] E4M3 bytes (only columns < k written).
// row_scale: [m] device floats, receives s_r (x_r ~ x8_r * s_r; 1 for an all-zero row).
// Returns the cudaError_t of the launch.
int fp8_quantize_x(int64_t m, int64_t k, const float* x, int64_t ldx, uint8_t* x8, int64_t ld8,
                   float* row_scale, cudaStream_t stream);

// y[r, c] = y[r, c] * (row_scale[r] * w_scale[c]) + (bias ? bias[c] : 0) for r < m, c < n.
// y: [m, n] row stride ldy; row_scale: [m]; w_scale: [n] f32; bias: [n] f32 or null.
int fp8_scale_bias(int64_t m, int64_t n, float* y, int64_t ldy, const float* row_scale,
                   const float* w_scale, const float* bias, cudaStream_t stream);

}  // namespace sampan::cuda
