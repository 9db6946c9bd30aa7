// GGUF block-type GEMV and bf16 dequantization; contracts and error bounds in gemm_ggml.cuh.
//
// GEMV design (mirrors gemm_gemv_quant.cu). A block of 8 warps owns 16 consecutive output rows
// (2 per warp, so each staged x value feeds two rows). k is walked in tiles of 32 units (a unit:
// 32 consecutive elements, see gemm_ggml_decode.cuh), one per lane, so a warp reads a contiguous
// stretch of blocks of a row per tile and every weight byte is loaded from memory once per call.
// The tile of x ([kM, 1024] f32, zero-padded past m and k) sits in shared memory, padded by 4
// floats per unit so the lanes' 128-bit reads hit distinct banks. Each lane decodes its unit to
// 32 exact f32 weights in registers and accumulates x * w with f32 FMAs, one accumulator per
// (row, x row); a warp-shuffle tree finishes and lane i stores y[i].
#include <cuda_bf16.h>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/gemm_ggml.cuh"
#include "kernels/cuda/gemm_ggml_decode.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kUnit = 32;                        // elements per unit
constexpr int kTile = kWarpSize * kUnit;         // k elements per tile: one unit per lane
constexpr int kUnitPitch = kUnit + 4;            // staged floats per unit (padded)
constexpr int kPitch = kWarpSize * kUnitPitch;   // staged floats per x row

// Kernel parameters (by value). Global row g of W (= column g of y) lives in the first block b
// with g < row_end[b].
struct GgmlGemvArgs {
  const uint8_t* w[kMaxGemmBlocks];
  const float* bias[kMaxGemmBlocks];
  int64_t row_end[kMaxGemmBlocks];
  int n_blocks;
  int64_t n;
  int64_t k;
  int64_t row_bytes;
  int m;
  const float* x;  // [m, k] row stride ldx
  int64_t ldx;
  float* y;        // [m, n] row stride ldy
  int64_t ldy;
};

// kM: rows of x the registers are sized for (>= m; rows past m are staged as zeros).
template <GgmlType T, int kM>
__global__ void __launch_bounds__(kThreads) ggml_gemv_kernel(const GgmlGemvArgs a) {
  constexpr int kUnitsPerBlock = static_cast<int>(ggml_block_size(T)) / kUnit;
  constexpr int64_t kBlockBytes = ggml_type_size(T);
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [kM][kPitch]

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;

  // This warp's rows, resolved once.
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRowsPerWarp;
  bool valid[kRowsPerWarp];
  const uint8_t* wrow[kRowsPerWarp];
  const float* brow[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t g = row0 + r;
    valid[r] = g < a.n;
    int b = 0;
    while (b + 1 < a.n_blocks && g >= a.row_end[b]) ++b;
    const int64_t lr = g - (b > 0 ? a.row_end[b - 1] : 0);
    wrow[r] = valid[r] ? a.w[b] + lr * a.row_bytes : nullptr;
    brow[r] = valid[r] && a.bias[b] ? a.bias[b] + lr : nullptr;
  }

  float acc[kRowsPerWarp][kM] = {};
  for (int64_t t0 = 0; t0 < a.k; t0 += kTile) {
    __syncthreads();  // every warp is done reading the previous tile of x
    for (int idx = static_cast<int>(threadIdx.x); idx < kM * kTile; idx += kThreads) {
      const int i = idx / kTile, j = idx % kTile;
      const int64_t col = t0 + j;
      xs[i * kPitch + (j / kUnit) * kUnitPitch + j % kUnit] =
          (i < a.m && col < a.k) ? a.x[static_cast<int64_t>(i) * a.ldx + col] : 0.0f;
    }
    __syncthreads();
    const int64_t unit = t0 / kUnit + lane;
    if (unit * kUnit < a.k) {
      const int64_t blk = unit / kUnitsPerBlock;
      const int u = static_cast<int>(unit % kUnitsPerBlock);
      const float* xl = xs + lane * kUnitPitch;  // this lane's unit of x row 0
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (!valid[r]) continue;  // warp-uniform
        float wv[kUnit];
        ggml::decode32<T>(wrow[r] + blk * kBlockBytes, u, wv);
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          float s = acc[r][i];
#pragma unroll
          for (int e = 0; e < kUnit / 4; ++e) {
            const float4 xv = *reinterpret_cast<const float4*>(xl + i * kPitch + 4 * e);
            s = fmaf(xv.x, wv[4 * e], s);
            s = fmaf(xv.y, wv[4 * e + 1], s);
            s = fmaf(xv.z, wv[4 * e + 2], s);
            s = fmaf(xv.w, wv[4 * e + 3], s);
          }
          acc[r][i] = s;
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == i && i < a.m && valid[r]) {
        a.y[static_cast<int64_t>(i) * a.ldy + row0 + r] = v + (brow[r] ? *brow[r] : 0.0f);
      }
    }
  }
}

template <GgmlType T, int kM>
int launch_gemv(const GgmlGemvArgs& a, cudaStream_t stream) {
  constexpr size_t kShared = sizeof(float) * kM * kPitch;
  static_assert(kShared <= kDefaultSharedBytes, "x tile must fit without opt-in shared memory");
  const int64_t blocks = ceil_div(a.n, kRowsPerBlock);
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  ggml_gemv_kernel<T, kM><<<static_cast<unsigned>(blocks), kThreads, kShared, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <GgmlType T>
int launch_gemv_m(const GgmlGemvArgs& a, cudaStream_t stream) {
  if (a.m <= 1) return launch_gemv<T, 1>(a, stream);
  if (a.m <= 2) return launch_gemv<T, 2>(a, stream);
  if (a.m <= 4) return launch_gemv<T, 4>(a, stream);
  return launch_gemv<T, 8>(a, stream);
}

// One thread per unit: decode 32 elements exactly in f32, round each to bf16, store 16 pairs.
// w and out start at the chunk's first row.
template <GgmlType T>
__global__ void ggml_dequant_bf16_kernel(int64_t rows, int64_t units_per_row, int64_t row_bytes,
                                         const uint8_t* __restrict__ w,
                                         __nv_bfloat162* __restrict__ out, int64_t ldo2) {
  constexpr int kUnitsPerBlock = static_cast<int>(ggml_block_size(T)) / kUnit;
  constexpr int64_t kBlockBytes = ggml_type_size(T);
  const int64_t total = rows * units_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / units_per_row, unit = i % units_per_row;
    float wv[kUnit];
    ggml::decode32<T>(w + r * row_bytes + (unit / kUnitsPerBlock) * kBlockBytes,
                      static_cast<int>(unit % kUnitsPerBlock), wv);
    __nv_bfloat162* o = out + r * ldo2 + unit * (kUnit / 2);
#pragma unroll
    for (int e = 0; e < kUnit / 2; ++e) o[e] = __floats2bfloat162_rn(wv[2 * e], wv[2 * e + 1]);
  }
}

constexpr int kDequantThreads = 256;

template <GgmlType T>
int launch_dequant(unsigned grid, int64_t rows, int64_t units, int64_t row_bytes,
                   const uint8_t* data, __nv_bfloat162* out, int64_t ldo2, cudaStream_t stream) {
  ggml_dequant_bf16_kernel<T><<<grid, kDequantThreads, 0, stream>>>(rows, units, row_bytes, data,
                                                                    out, ldo2);
  return static_cast<int>(cudaGetLastError());
}
constexpr int64_t kDequantMaxBlocks = 8192;  // grid-stride loops cover the rest

bool weights_ok(const GemmWeights& w) {
  if (w.dtype != DType::kU8 || !ggml_cuda_supported(w.ggml_type) || w.k < 1 ||
      w.k % ggml_block_size(w.ggml_type) != 0 || w.n_blocks < 1 || w.n_blocks > kMaxGemmBlocks) {
    return false;
  }
  for (int b = 0; b < w.n_blocks; ++b) {
    if (!w.data[b] || reinterpret_cast<uintptr_t>(w.data[b]) % 2 != 0) return false;
  }
  return true;
}

}  // namespace

int ggml_gemv(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
              int64_t ldy, cudaStream_t stream) {
  static_assert(kGemvMaxM <= 8, "register tiles are sized for at most 8 rows of x");
  if (m < 1 || m > kGemvMaxM || !weights_ok(w) || ldx < w.k) return cudaErrorInvalidValue;
  GgmlGemvArgs a = {};
  a.n_blocks = w.n_blocks;
  a.k = w.k;
  a.row_bytes = ggml_row_bytes(w.ggml_type, w.k);
  a.m = static_cast<int>(m);
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  int64_t end = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    a.w[b] = static_cast<const uint8_t*>(w.data[b]);
    a.bias[b] = w.bias[b];
    end += w.rows[b];
    a.row_end[b] = end;
  }
  a.n = end;
  if (a.n < 1) return cudaSuccess;
  if (ldy < a.n) return cudaErrorInvalidValue;
  switch (w.ggml_type) {
    SAMPAN_GGML_TYPE_CASES(launch_gemv_m, a, stream)
    default: break;
  }
  return cudaErrorInvalidValue;
}

int ggml_dequant_rows_bf16(const GemmWeights& w, int block, int64_t row0, int64_t rows, void* out,
                           int64_t ldo, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (!weights_ok(w) || block < 0 || block >= w.n_blocks || row0 < 0 ||
      row0 + rows > w.rows[block] || ldo < w.k || ldo % 2 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t row_bytes = ggml_row_bytes(w.ggml_type, w.k);
  const auto* data = static_cast<const uint8_t*>(w.data[block]) + row0 * row_bytes;
  const int64_t units = w.k / kUnit;
  const auto grid = static_cast<unsigned>(
      min64(max64(ceil_div(rows * units, kDequantThreads), 1), kDequantMaxBlocks));
  auto* o = static_cast<__nv_bfloat162*>(out);
  switch (w.ggml_type) {
    SAMPAN_GGML_TYPE_CASES(launch_dequant, grid, rows, units, row_bytes, data, o, ldo / 2, stream)
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
