// Walsh-Hadamard: a thread block loads a tile of whole Hadamard blocks of one row into shared
// memory, runs the log2(block) radix-2 stages there (a barrier between stages), and writes the
// scaled result. Tiles never straddle a Hadamard block, so tiles are independent; the whole tile
// is read before any of it is written, so the transform may run in place.
#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/hadamard.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

// kVec: the tile moves as float4 (block >= 4 keeps tile starts and lengths multiples of 4).
template <bool kVec>
__global__ void __launch_bounds__(kHadamardMaxThreads) hadamard_kernel(int64_t rows, int64_t n,
                                int log2_block, int64_t tile_floats, int64_t tiles_per_row,
                                const float* x, int64_t ldx,  // [rows, n]
                                float scale,
                                float* y, int64_t ldy) {      // [rows, n]
  extern __shared__ float tile[];  // [tile_floats]
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t t = blockIdx.x; t < tiles_per_row; t += gridDim.x) {
      const int64_t c0 = t * tile_floats;
      // The last tile of a row may hold fewer blocks; it still holds whole ones.
      const int len = static_cast<int>(n - c0 < tile_floats ? n - c0 : tile_floats);
      const float* xs = x + r * ldx + c0;
      float* ys = y + r * ldy + c0;
      if constexpr (kVec) {
        for (int i = tid; i < len / 4; i += threads) {
          reinterpret_cast<float4*>(tile)[i] = reinterpret_cast<const float4*>(xs)[i];
        }
      } else {
        for (int i = tid; i < len; i += threads) tile[i] = xs[i];
      }
      __syncthreads();
      // Stage h pairs (i, i + h) inside each 2h-aligned group: butterfly p of the stage is group
      // p / h, offset p % h. Groups never cross a Hadamard block since 2h <= block.
      for (int lg = 0; lg < log2_block; ++lg) {
        const int h = 1 << lg;
        for (int p = tid; p < len / 2; p += threads) {
          const int i = ((p >> lg) << (lg + 1)) | (p & (h - 1));
          const float a = tile[i];
          const float b = tile[i + h];
          tile[i] = a + b;
          tile[i + h] = a - b;
        }
        __syncthreads();
      }
      if constexpr (kVec) {
        for (int i = tid; i < len / 4; i += threads) {
          const float4 v = reinterpret_cast<const float4*>(tile)[i];
          reinterpret_cast<float4*>(ys)[i] =
              make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
        }
      } else {
        for (int i = tid; i < len; i += threads) ys[i] = tile[i] * scale;
      }
      // The next tile's loads must not overwrite values another thread has yet to store.
      __syncthreads();
    }
  }
}

bool power_of_two(int64_t v) { return v >= 1 && (v & (v - 1)) == 0; }

// Shared memory one thread block may use on the current device, opt-in included.
int64_t max_shared_bytes() {
  int device = 0;
  int bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    return -1;
  }
  return bytes;
}

}  // namespace

int64_t hadamard_max_block() {
  const int64_t bytes = max_shared_bytes();
  if (bytes < 0) {
    cudaGetLastError();
    return -1;
  }
  int64_t block = 1;
  while (static_cast<int64_t>(hadamard_plan(2 * block, 2 * block).shared_bytes) <= bytes) block *= 2;
  return block;
}

int hadamard(int64_t rows, int64_t n, int64_t block, const float* x, int64_t ldx, float* y,
             int64_t ldy, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (!power_of_two(block) || n % block != 0) return cudaErrorInvalidValue;
  const HadamardPlan plan = hadamard_plan(n, block);
  const int64_t tile_floats = plan.blocks_per_tile * block;
  int log2_block = 0;
  while ((int64_t{1} << log2_block) < block) ++log2_block;
  // The CPU's normalisation, computed the same way on the host.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
  const bool vec = block >= 4 && ldx % 4 == 0 && ldy % 4 == 0 && aligned16(x) && aligned16(y);
  const auto kernel = vec ? hadamard_kernel<true> : hadamard_kernel<false>;
  if (plan.shared_bytes > kDefaultSharedBytes) {
    const int64_t limit = max_shared_bytes();
    if (limit < 0) return static_cast<int>(cudaGetLastError());
    if (static_cast<int64_t>(plan.shared_bytes) > limit) return cudaErrorInvalidValue;
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.shared_bytes));
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  const dim3 grid(static_cast<unsigned>(min64(plan.tiles_per_row, kMaxGridX)),
                  static_cast<unsigned>(min64(rows, kMaxGridY)));
  kernel<<<grid, plan.threads, plan.shared_bytes, stream>>>(rows, n, log2_block, tile_floats,
                                                            plan.tiles_per_row, x, ldx, scale, y,
                                                            ldy);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
