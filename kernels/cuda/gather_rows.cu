#include "kernels/cuda/gather_rows.cuh"

namespace sampan::cuda {
namespace {

constexpr int kThreads = 256;
// gridDim.y holds at most 65535 blocks: longer index lists loop over y.
constexpr int64_t kMaxGridY = 65535;

// Blocks (x: column chunk, y: output row); each thread copies one column of one row.
__global__ void gather_rows_kernel(int64_t rows, int64_t n, const float* __restrict__ x,
                                   int64_t ldx, const int32_t* __restrict__ index, int64_t m,
                                   float* __restrict__ y, int64_t ldy, FaultSink fault) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n) return;
  for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
    const int64_t r = index[i];
    const bool ok = r >= 0 && r < rows;
    y[i * ldy + j] = ok ? x[r * ldx + j] : __int_as_float(0x7fc00000);
    if (!ok && j == 0) report_fault(fault, kGatherBadIndex);
  }
}

}  // namespace

int gather_rows(int64_t rows, int64_t n, const float* x, int64_t ldx, const int32_t* index,
                int64_t m, float* y, int64_t ldy, FaultSink fault, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const int64_t gx = (n + kThreads - 1) / kThreads;  // n < 2^31 * 256 for any real row
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(m < kMaxGridY ? m : kMaxGridY));
  gather_rows_kernel<<<grid, kThreads, 0, stream>>>(rows, n, x, ldx, index, m, y, ldy, fault);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
