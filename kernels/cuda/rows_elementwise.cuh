// A binary element-wise kernel over row-strided matrices, shared by add and silu_mul (device
// code and a launcher template: included by .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {

constexpr int kBinaryRowsThreads = 256;

// y[r, c] = op(a[r, c], b[r, c]). gridDim.y walks rows and gridDim.x column tiles, each looping
// past what the grid covers. kVec: columns move as float4 (the launcher checked alignment).
// No __restrict__: y may alias a or b (each element is read, then written, by one thread).
template <class Op, bool kVec>
__global__ void __launch_bounds__(kBinaryRowsThreads) binary_rows_kernel(int64_t rows, int64_t cols,
                                   const float* a, int64_t lda,  // [rows, cols]
                                   const float* b, int64_t ldb,  // [rows, cols]
                                   float* y, int64_t ldy,        // [rows, cols]
                                   Op op) {
  const int64_t units = kVec ? cols / 4 : cols;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* ar = a + r * lda;
    const float* br = b + r * ldb;
    float* yr = y + r * ldy;
    for (int64_t c = first; c < units; c += step) {
      if constexpr (kVec) {
        const float4 va = reinterpret_cast<const float4*>(ar)[c];
        const float4 vb = reinterpret_cast<const float4*>(br)[c];
        reinterpret_cast<float4*>(yr)[c] =
            make_float4(op(va.x, vb.x), op(va.y, vb.y), op(va.z, vb.z), op(va.w, vb.w));
      } else {
        yr[c] = op(ar[c], br[c]);
      }
    }
  }
}

// a, b, y: [rows, cols] with their own row strides (in floats), device pointers. Returns the
// cudaError_t of the launch.
template <class Op>
int launch_binary_rows(int64_t rows, int64_t cols, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float* y, int64_t ldy, Op op, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const bool vec = cols % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 && ldy % 4 == 0 &&
                   aligned16(a) && aligned16(b) && aligned16(y);
  const Grid2 g = rows_grid(rows, vec ? cols / 4 : cols, kBinaryRowsThreads);
  const dim3 grid(g.x, g.y);
  if (vec) {
    binary_rows_kernel<Op, true><<<grid, kBinaryRowsThreads, 0, stream>>>(rows, cols, a, lda, b, ldb, y, ldy, op);
  } else {
    binary_rows_kernel<Op, false><<<grid, kBinaryRowsThreads, 0, stream>>>(rows, cols, a, lda, b, ldb, y, ldy, op);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
