// Activation quantization and the scale epilogue around cuBLASLt's FP8 product; see
// fp8_gemm.cuh.
#include <cuda_fp8.h>

#include <cfloat>

#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks of the max reduction: each ends in one atomic, so few of them, each looping over rows.
constexpr int64_t kMaxReduceBlocks = 1024;
constexpr float kE4M3Max = 448.0f;

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// max |x| over finite elements into *amax_bits (as the bits of a non-negative float, whose
// unsigned order is the float order; zeroed by the launcher).
__global__ void absmax_kernel(int64_t m, int64_t k,
                              const float* __restrict__ x, int64_t ldx,  // [m, k]
                              unsigned* __restrict__ amax_bits) {
  __shared__ float partial[kThreads / kWarpSize];
  float v = 0.0f;
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
      const float a = fabsf(x[r * ldx + c]);
      if (a <= FLT_MAX) v = fmaxf(v, a);  // false for inf and NaN
    }
  }
  v = warp_max(v);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_max(lane < kThreads / kWarpSize ? partial[lane] : 0.0f);
    if (lane == 0) atomicMax(amax_bits, __float_as_uint(v));
  }
}

__global__ void quantize_kernel(int64_t m, int64_t k,
                                const float* __restrict__ x, int64_t ldx,  // [m, k]
                                uint8_t* __restrict__ x8, int64_t ld8,     // [m, k]
                                float* __restrict__ scale) {               // [2]
  const float amax = __uint_as_float(*reinterpret_cast<const unsigned*>(scale));
  float s = amax / kE4M3Max;
  if (!(s > 0.0f)) s = 1.0f;  // all-zero x (or a max so small the quotient underflows)
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) scale[1] = s;
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < k;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      x8[r * ld8 + c] = __nv_cvt_float_to_fp8(x[r * ldx + c] / s, __NV_SATFINITE, __NV_E4M3);
    }
  }
}

__global__ void scale_bias_kernel(int64_t m, int64_t n,
                                  float* __restrict__ y, int64_t ldy,       // [m, n]
                                  const float* __restrict__ w_scale,        // [n]
                                  const float* __restrict__ bias) {         // [n] or null
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < n;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float& v = y[r * ldy + c];
      v = v * w_scale[c] + (bias ? bias[c] : 0.0f);
    }
  }
}

}  // namespace

int fp8_quantize_x(int64_t m, int64_t k, const float* x, int64_t ldx, uint8_t* x8, int64_t ld8,
                   float* scale, cudaStream_t stream) {
  if (m <= 0 || k <= 0) return cudaSuccess;
  if (const cudaError_t e = cudaMemsetAsync(scale, 0, sizeof(float), stream); e != cudaSuccess) {
    return static_cast<int>(e);
  }
  absmax_kernel<<<static_cast<unsigned>(min64(m, kMaxReduceBlocks)), kThreads, 0, stream>>>(
      m, k, x, ldx, reinterpret_cast<unsigned*>(scale));
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
  const Grid2 grid = rows_grid(m, k, kThreads);
  quantize_kernel<<<dim3(grid.x, grid.y), kThreads, 0, stream>>>(m, k, x, ldx, x8, ld8, scale);
  return static_cast<int>(cudaGetLastError());
}

int fp8_scale_bias(int64_t m, int64_t n, float* y, int64_t ldy, const float* w_scale,
                   const float* bias, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const Grid2 grid = rows_grid(m, n, kThreads);
  scale_bias_kernel<<<dim3(grid.x, grid.y), kThreads, 0, stream>>>(m, n, y, ldy, w_scale, bias);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
