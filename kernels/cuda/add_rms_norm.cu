// Fused residual add + RMSNorm: one thread block per row. Pass 1 stores sum = x + residual and
// sums its squares; pass 2 reads the stored sum back (the same thread wrote it, so no barrier
// is needed for it) and rescales. The squares are of the stored f32 sum, as on the CPU.
#include "kernels/cuda/add_rms_norm.cuh"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/rms_norm_row.cuh"

namespace sampan::cuda {
namespace {

template <bool kVec>
__global__ void __launch_bounds__(kMaxBlockThreads) add_rms_norm_kernel(int64_t rows, int64_t dim,
                                    const float* x, int64_t ldx,    // [rows, dim]
                                    const float* res, int64_t ldr,  // [rows, dim]
                                    const float* __restrict__ w,    // [dim]
                                    float eps,
                                    float* sum, int64_t lds,        // [rows, dim]
                                    float* y, int64_t ldy) {        // [rows, dim]
  // No __restrict__ on x, res and sum: sum may alias either. Every element of a row is read,
  // summed and stored by one thread, and read back by that same thread in pass 2.
  __shared__ float partial[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * ldx;
    const float* rr = res + r * ldr;
    float* sr = sum + r * lds;
    const auto load = [xr, rr, sr](int64_t i) {
      if constexpr (kVec) {
        const float4 a = reinterpret_cast<const float4*>(xr)[i];
        const float4 b = reinterpret_cast<const float4*>(rr)[i];
        const float4 s = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        reinterpret_cast<float4*>(sr)[i] = s;
        return s;
      } else {
        const float s = xr[i] + rr[i];
        sr[i] = s;
        return s;
      }
    };
    rms_norm_row<kVec>(dim, load, sr, w, eps, y + r * ldy, partial);
  }
}

}  // namespace

int add_rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* residual,
                 int64_t ldr, const float* w, float eps, float* sum, int64_t lds, float* y,
                 int64_t ldy, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  const bool vec = dim % 4 == 0 && ldx % 4 == 0 && ldr % 4 == 0 && lds % 4 == 0 &&
                   ldy % 4 == 0 && aligned16(x) && aligned16(residual) && aligned16(w) &&
                   aligned16(sum) && aligned16(y);
  const int threads = row_block_threads(vec ? dim / 4 : dim);
  if (vec) {
    add_rms_norm_kernel<true><<<row_grid(rows), threads, 0, stream>>>(
        rows, dim, x, ldx, residual, ldr, w, eps, sum, lds, y, ldy);
  } else {
    add_rms_norm_kernel<false><<<row_grid(rows), threads, 0, stream>>>(
        rows, dim, x, ldx, residual, ldr, w, eps, sum, lds, y, ldy);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
