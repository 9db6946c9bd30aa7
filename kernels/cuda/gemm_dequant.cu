// Weight rows -> bf16 for the tensor-core paths; contract in gemm_dequant.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/gemm_decode.cuh"
#include "kernels/cuda/gemm_dequant.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover the rest; enough blocks to fill any current GPU several times.
constexpr int64_t kMaxBlocks = 8192;

// One thread per packed byte (two elements, always in the same group: 2j is even and groups
// have even sizes). w, s, z start at the chunk's first row.
template <typename ScaleT>
__global__ void dequant_int4_kernel(int64_t rows, int64_t k,
                                    const uint8_t* __restrict__ w,  // [rows, k / 2]
                                    const ScaleT* __restrict__ s,   // [rows, k >> shift]
                                    const int8_t* __restrict__ z,   // [rows, k >> shift] or null
                                    int shift,
                                    __nv_bfloat162* __restrict__ out,  // [rows, ldo2] pairs
                                    int64_t ldo2) {
  const int64_t half_k = k / 2;
  const int64_t groups = k >> shift;
  const int64_t total = rows * half_k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / half_k, j = i % half_k;
    const uint32_t b = w[i];
    // Sign-extend each nibble (two's complement q in [-8, 7]); low nibble is element 2j.
    const int32_t q0 = static_cast<int32_t>(b << 28) >> 28;
    const int32_t q1 = static_cast<int32_t>(b << 24) >> 28;
    const int64_t g = r * groups + ((2 * j) >> shift);
    const float scale = load_scale(s, g);
    const float zero = z ? static_cast<float>(z[g]) : 0.0f;
    // (q - z) is exact in f32, one rounding for the product (as the CPU), one to bf16.
    out[r * ldo2 + j] = __floats2bfloat162_rn((static_cast<float>(q0) - zero) * scale,
                                              (static_cast<float>(q1) - zero) * scale);
  }
}

__global__ void dequant_fp8_kernel(int64_t rows, int64_t k,
                                   const uint8_t* __restrict__ w,   // [rows, k]
                                   const float* __restrict__ s,     // [rows]
                                   __nv_bfloat16* __restrict__ out,  // [rows, ldo]
                                   int64_t ldo) {
  const int64_t total = rows * k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i % k;
    // (v / 256) * 256 is exact, so this is fp8_to_f32(v) * scale rounded once, then to bf16.
    const float v = fp8_e4m3_to_f32_div256(w[i]) * 256.0f;
    out[r * ldo + c] = __float2bfloat16_rn(v * s[r]);
  }
}

unsigned grid_for(int64_t total) {
  return static_cast<unsigned>(min64(max64(ceil_div(total, kThreads), 1), kMaxBlocks));
}

}  // namespace

int dequant_rows_bf16(const GemmWeights& w, int block, int64_t row0, int64_t rows, void* out,
                      int64_t ldo, cudaStream_t stream) {
  if (rows <= 0 || w.k <= 0) return cudaSuccess;
  if (block < 0 || block >= w.n_blocks || row0 < 0 || row0 + rows > w.rows[block] || ldo < w.k) {
    return cudaErrorInvalidValue;
  }
  const auto* data = static_cast<const uint8_t*>(w.data[block]);
  if (w.dtype == DType::kF8E4M3) {
    dequant_fp8_kernel<<<grid_for(rows * w.k), kThreads, 0, stream>>>(
        rows, w.k, data + row0 * w.k, static_cast<const float*>(w.scales[block]) + row0,
        static_cast<__nv_bfloat16*>(out), ldo);
    return static_cast<int>(cudaGetLastError());
  }
  if (w.dtype != DType::kI4 || ldo % 2 != 0) return cudaErrorInvalidValue;
  int shift = 0;
  switch (w.group_size) {
    case 32: shift = 5; break;
    case 64: shift = 6; break;
    case 128: shift = 7; break;
    default: return cudaErrorInvalidValue;
  }
  const int64_t groups = w.k >> shift;
  const int8_t* z = w.zeros[block] ? w.zeros[block] + row0 * groups : nullptr;
  const unsigned grid = grid_for(rows * (w.k / 2));
  auto* o = static_cast<__nv_bfloat162*>(out);
  if (w.scale_dtype == DType::kF16) {
    dequant_int4_kernel<<<grid, kThreads, 0, stream>>>(
        rows, w.k, data + row0 * (w.k / 2),
        static_cast<const __half*>(w.scales[block]) + row0 * groups, z, shift, o, ldo / 2);
  } else if (w.scale_dtype == DType::kBF16) {
    dequant_int4_kernel<<<grid, kThreads, 0, stream>>>(
        rows, w.k, data + row0 * (w.k / 2),
        static_cast<const __nv_bfloat16*>(w.scales[block]) + row0 * groups, z, shift, o, ldo / 2);
  } else {
    return cudaErrorInvalidValue;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
