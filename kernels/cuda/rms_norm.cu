// RMSNorm: one thread block per row. Pass 1 sums squares (each thread a strided slice, then a
// deterministic block sum), pass 2 rescales; the row is read twice, the second time mostly from
// L1/L2 since a row is at most tens of KB.
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rms_norm_row.cuh"

namespace sampan::cuda {
namespace {

// kVec: rows are read and written as float4 (dim, strides and pointers allow it, see launcher).
template <bool kVec>
__global__ void __launch_bounds__(kMaxBlockThreads) rms_norm_kernel(int64_t rows, int64_t dim,
                                const float* x, int64_t ldx,  // [rows, dim]
                                const float* __restrict__ w,  // [dim]
                                float eps,
                                float* y, int64_t ldy) {      // [rows, dim]
  // No __restrict__ on x and y: they may alias. In place is safe because each element is read
  // and then written by the same thread, and rows never overlap.
  __shared__ float partial[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * ldx;
    const auto load = [xr](int64_t i) {
      if constexpr (kVec) {
        return reinterpret_cast<const float4*>(xr)[i];
      } else {
        return xr[i];
      }
    };
    rms_norm_row<kVec>(dim, load, xr, w, eps, y + r * ldy, partial);
  }
}

}  // namespace

int rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w, float eps,
             float* y, int64_t ldy, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  const bool vec = dim % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && aligned16(x) && aligned16(w) &&
                   aligned16(y);
  const int threads = row_block_threads(vec ? dim / 4 : dim);
  if (vec) {
    rms_norm_kernel<true><<<row_grid(rows), threads, 0, stream>>>(rows, dim, x, ldx, w, eps, y, ldy);
  } else {
    rms_norm_kernel<false><<<row_grid(rows), threads, 0, stream>>>(rows, dim, x, ldx, w, eps, y, ldy);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
