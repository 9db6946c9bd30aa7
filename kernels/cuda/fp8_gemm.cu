// Activation quantization and the scale epilogue around cuBLASLt's FP8 product; see
// fp8_gemm.cuh.
#include <cuda_fp8.h>

#include <cfloat>

#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.0f;

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// One block per row (looping when m exceeds the grid): the row's max |x| over finite elements,
// then its codes. The second pass reads the row again from cache.
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(
    int64_t m, int64_t k,
    const float* __restrict__ x, int64_t ldx,  // [m, k]
    uint8_t* __restrict__ x8, int64_t ld8,     // [m, k]
    float* __restrict__ row_scale) {           // [m]
  __shared__ float partial[kThreads / kWarpSize];
  __shared__ float row_s;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const float* xr = x + r * ldx;
    float v = 0.0f;
    for (int64_t c = threadIdx.x; c < k; c += kThreads) {
      const float a = fabsf(xr[c]);
      if (a <= FLT_MAX) v = fmaxf(v, a);  // false for inf and NaN
    }
    v = warp_max(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
      v = warp_max(lane < kThreads / kWarpSize ? partial[lane] : 0.0f);
      if (lane == 0) {
        float s = v / kE4M3Max;
        if (!(s > 0.0f)) s = 1.0f;  // all-zero row (or a max so small the quotient underflows)
        row_s = s;
        row_scale[r] = s;
      }
    }
    __syncthreads();
    const float s = row_s;
    for (int64_t c = threadIdx.x; c < k; c += kThreads) {
      x8[r * ld8 + c] = __nv_cvt_float_to_fp8(xr[c] / s, __NV_SATFINITE, __NV_E4M3);
    }
    __syncthreads();  // row_s and partial are rewritten for the next row
  }
}

__global__ void scale_bias_kernel(int64_t m, int64_t n,
                                  float* __restrict__ y, int64_t ldy,       // [m, n]
                                  const float* __restrict__ row_scale,      // [m]
                                  const float* __restrict__ w_scale,        // [n]
                                  const float* __restrict__ bias) {         // [n] or null
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    const float rs = row_scale[r];
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < n;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float& v = y[r * ldy + c];
      v = v * (rs * w_scale[c]) + (bias ? bias[c] : 0.0f);
    }
  }
}

}  // namespace

int fp8_quantize_x(int64_t m, int64_t k, const float* x, int64_t ldx, uint8_t* x8, int64_t ld8,
                   float* row_scale, cudaStream_t stream) {
  if (m <= 0 || k <= 0) return cudaSuccess;
  quantize_rows_kernel<<<static_cast<unsigned>(min64(m, kMaxGridY)), kThreads, 0, stream>>>(
      m, k, x, ldx, x8, ld8, row_scale);
  return static_cast<int>(cudaGetLastError());
}

int fp8_scale_bias(int64_t m, int64_t n, float* y, int64_t ldy, const float* row_scale,
                   const float* w_scale, const float* bias, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const Grid2 grid = rows_grid(m, n, kThreads);
  scale_bias_kernel<<<dim3(grid.x, grid.y), kThreads, 0, stream>>>(m, n, y, ldy, row_scale,
                                                                    w_scale, bias);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
