// Weight rows -> bf16 for the tensor-core paths; contract in gemm_dequant.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/block_reduce.cuh"
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

// The same values as the kernels above, 16 bytes of weights per thread: one 16-byte load, one
// scale (and zero point) per thread instead of per element, 16-byte stores, and a 2-D grid
// (blockIdx.y: row) so no thread divides 64-bit indices per element. For 16-byte aligned
// weights and output rows with k % 32 == 0 (int4) / k % 16 == 0 (fp8): every 32 int4 elements
// of a row then lie in one group (groups are 32, 64 or 128 and divide k).
template <typename ScaleT>
__global__ void __launch_bounds__(kThreads) dequant_int4_vec_kernel(
    int64_t k,
    const uint8_t* __restrict__ w,   // [rows, k / 2]
    const ScaleT* __restrict__ s,    // [rows, k >> shift]
    const int8_t* __restrict__ z,    // [rows, k >> shift] or null
    int shift,
    __nv_bfloat16* __restrict__ out,  // [rows, ldo]
    int64_t ldo) {
  const int64_t r = blockIdx.y;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 32;
  if (c0 >= k) return;
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w + r * (k / 2) + c0 / 2));
  const int64_t g = r * (k >> shift) + (c0 >> shift);
  const float scale = load_scale(s, g);
  const float zero = z ? static_cast<float>(z[g]) : 0.0f;
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint4* o = reinterpret_cast<uint4*>(out + r * ldo + c0);
#pragma unroll
  for (int wi = 0; wi < 4; ++wi) {  // a word: 8 elements, one 16-byte store
    uint32_t packed[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const uint32_t b = words[wi] >> (8 * p);
      const int32_t q0 = static_cast<int32_t>(b << 28) >> 28;
      const int32_t q1 = static_cast<int32_t>(b << 24) >> 28;
      const __nv_bfloat162 v = __floats2bfloat162_rn((static_cast<float>(q0) - zero) * scale,
                                                     (static_cast<float>(q1) - zero) * scale);
      packed[p] = *reinterpret_cast<const uint32_t*>(&v);
    }
    o[wi] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

__global__ void __launch_bounds__(kThreads) dequant_fp8_vec_kernel(
    int64_t k,
    const uint8_t* __restrict__ w,    // [rows, k]
    const float* __restrict__ s,      // [rows]
    __nv_bfloat16* __restrict__ out,  // [rows, ldo]
    int64_t ldo) {
  const int64_t r = blockIdx.y;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 16;
  if (c0 >= k) return;
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w + r * k + c0));
  const float scale = s[r];
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t packed[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t word = words[e / 2] >> (16 * (e % 2));
    const float v0 = fp8_e4m3_to_f32_div256(word & 0xffu) * 256.0f;
    const float v1 = fp8_e4m3_to_f32_div256((word >> 8) & 0xffu) * 256.0f;
    const __nv_bfloat162 v = __floats2bfloat162_rn(v0 * scale, v1 * scale);
    packed[e] = *reinterpret_cast<const uint32_t*>(&v);
  }
  uint4* o = reinterpret_cast<uint4*>(out + r * ldo + c0);
  o[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  o[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
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
  if (rows > kMaxGridY) {  // the vector kernels' 2-D grid: pieces of at most kMaxGridY rows
    for (int64_t r = 0; r < rows; r += kMaxGridY) {
      const int64_t n = min64(kMaxGridY, rows - r);
      if (const int e = dequant_rows_bf16(w, block, row0 + r, n, static_cast<__nv_bfloat16*>(out) + r * ldo,
                                          ldo, stream)) {
        return e;
      }
    }
    return cudaSuccess;
  }
  const auto* data = static_cast<const uint8_t*>(w.data[block]);
  const bool vec = aligned16(out) && ldo % 8 == 0;
  if (w.dtype == DType::kF8E4M3 && vec && w.k % 16 == 0 && aligned16(data)) {
    const dim3 grid(static_cast<unsigned>(ceil_div(w.k / 16, kThreads)), static_cast<unsigned>(rows));
    dequant_fp8_vec_kernel<<<grid, kThreads, 0, stream>>>(
        w.k, data + row0 * w.k, static_cast<const float*>(w.scales[block]) + row0,
        static_cast<__nv_bfloat16*>(out), ldo);
    return static_cast<int>(cudaGetLastError());
  }
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
  const uint8_t* wd = data + row0 * (w.k / 2);
  const bool vec4 = vec && w.k % 32 == 0 && aligned16(data);
  // launch(scales of the chunk's first row, typed): the vector or the byte-wise kernel.
  auto launch = [&](const auto* sc) {
    if (vec4) {
      const dim3 grid(static_cast<unsigned>(ceil_div(w.k / 32, kThreads)), static_cast<unsigned>(rows));
      dequant_int4_vec_kernel<<<grid, kThreads, 0, stream>>>(
          w.k, wd, sc, z, shift, static_cast<__nv_bfloat16*>(out), ldo);
    } else {
      dequant_int4_kernel<<<grid_for(rows * (w.k / 2)), kThreads, 0, stream>>>(
          rows, w.k, wd, sc, z, shift, static_cast<__nv_bfloat162*>(out), ldo / 2);
    }
    return static_cast<int>(cudaGetLastError());
  };
  if (w.scale_dtype == DType::kF16) return launch(static_cast<const __half*>(w.scales[block]) + row0 * groups);
  if (w.scale_dtype == DType::kBF16) {
    return launch(static_cast<const __nv_bfloat16*>(w.scales[block]) + row0 * groups);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
