// The pieces around cuBLASLt's FP8 x FP8 product (sm_89+) for kF8E4M3 weights with f32
// activations (gemm.cuh):
//   1. x is quantized to E4M3 with one scale for the whole tensor, computed on the GPU
//      (scale = max|x| / 448; no host round trip, so the call stays asynchronous);
//   2. cuBLASLt multiplies, with that scale as its B scale;
//   3. fp8_scale_bias applies the per-output-row weight scale and the bias (cuBLASLt's scalar
//      A scale cannot hold a vector).
// Error from step 1: E4M3 keeps 4 significant bits (2^-4 relative), and elements below
// 2^-6 * scale are subnormal (absolute error up to 2^-10 * scale). Non-finite elements of x are
// left out of the maximum (one inf must not zero every other row); they saturate to +-448 * scale.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// Device scratch this needs next to x8: two f32 words (the max, then the scale).
constexpr int64_t kFp8ScaleWords = 2;

// x: [m, k] f32 row stride ldx. x8: [m, ld8] E4M3 bytes (only columns < k written).
// scale: [kFp8ScaleWords] device floats; scale[1] receives the dequantization scale
// (x ~ x8 * scale[1]), for cuBLASLt's B_SCALE_POINTER. Returns the cudaError_t.
int fp8_quantize_x(int64_t m, int64_t k, const float* x, int64_t ldx, uint8_t* x8, int64_t ld8,
                   float* scale, cudaStream_t stream);

// y[r, c] = y[r, c] * w_scale[c] + (bias ? bias[c] : 0) for r < m, c < n.
// y: [m, n] row stride ldy; w_scale: [n] f32; bias: [n] f32 or null.
int fp8_scale_bias(int64_t m, int64_t n, float* y, int64_t ldy, const float* w_scale,
                   const float* bias, cudaStream_t stream);

}  // namespace sampan::cuda
