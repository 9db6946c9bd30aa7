// Deterministic block-wide sums for the row kernels (device code: included by .cu files only).
// Shuffle trees in a fixed order, no atomics: the same input and launch shape give the same bits
// on every run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of `v` over a 1-D block whose size is a multiple of 32 (full warps: the shuffles use the
// full mask). Every thread gets the total; every warp reduces the same partials in the same
// order, so all threads hold identical bits. partial: [32] shared values of T (float, int...).
// Must be reached by every thread of the block; safe to call again at once (the leading barrier
// keeps a new round's writes from overtaking a slow warp still reading the last round's
// partials).
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* partial) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int n_warps = static_cast<int>(blockDim.x) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < n_warps ? partial[lane] : T(0));
}

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace sampan::cuda
