// The body of one RMSNorm row, shared by rms_norm.cu and add_rms_norm.cu (device code: included
// by .cu files only), so that both keep the operation order of kernels/cpu/rms_norm_cpu.h bit for
// bit: the same per-thread fmaf chain, block_sum tree and f32 scale.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"

namespace sampan::cuda {

__device__ __forceinline__ float add_squares(float ss, float v) { return fmaf(v, v, ss); }
__device__ __forceinline__ float add_squares(float ss, float4 v) {
  ss = fmaf(v.x, v.x, ss);
  ss = fmaf(v.y, v.y, ss);
  ss = fmaf(v.z, v.z, ss);
  return fmaf(v.w, v.w, ss);
}

// yr = (xr * scale) * w at unit i (a float, or a float4 when kVec), the CPU's order.
template <bool kVec>
__device__ __forceinline__ void scale_row_unit(const float* xr, const float* __restrict__ w,
                                               float scale, float* yr, int64_t i) {
  if constexpr (kVec) {
    const float4 v = reinterpret_cast<const float4*>(xr)[i];
    const float4 g = reinterpret_cast<const float4*>(w)[i];
    reinterpret_cast<float4*>(yr)[i] =
        make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
  } else {
    yr[i] = xr[i] * scale * w[i];
  }
}

// One row normalised by the whole (1-D, full-warp) block. Pass 1 sums the squares of load(i), the
// row's unit i (a float, or a float4 when kVec); load may also store what it returns, which is
// how add_rms_norm writes its sum. Pass 2 reads the row back from xr, which must then hold those
// values for the units this thread loaded: each unit is loaded and read back by the same thread,
// so no barrier is needed between the passes, and yr may alias xr. partial: [32] shared floats.
template <bool kVec, class Load>
__device__ __forceinline__ void rms_norm_row(int64_t dim, Load load, const float* xr,
                                             const float* __restrict__ w, float eps, float* yr,
                                             float* partial) {
  const int64_t units = kVec ? dim / 4 : dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < units; i += blockDim.x) ss = add_squares(ss, load(i));
  ss = block_sum(ss, partial);
  // Mean, then 1 / sqrt in f32 as HF does (IEEE division and sqrt: no fast-math flags).
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < units; i += blockDim.x) {
    scale_row_unit<kVec>(xr, w, scale, yr, i);
  }
}

}  // namespace sampan::cuda
