// W4A16 / W8A16 GEMV; the design is described in gemm_gemv_quant.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/gemm_decode.cuh"
#include "kernels/cuda/gemm_gemv_quant.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kChunkBytes = 16;

enum class Fmt { kInt4F16, kInt4Bf16, kFp8 };

// Kernel parameters (by value: < 4 KB). Global row g of W (= column g of y) lives in the first
// block b with g < row_end[b].
struct GemvArgs {
  const uint8_t* w[kMaxGemmBlocks];
  const void* scales[kMaxGemmBlocks];
  const int8_t* zeros[kMaxGemmBlocks];
  const float* bias[kMaxGemmBlocks];
  int64_t row_end[kMaxGemmBlocks];
  int n_blocks;
  int64_t n;
  int64_t k;
  int group_shift;  // INT4: log2(group size)
  int m;
  const float* x;   // [m, k] row stride ldx
  int64_t ldx;
  float* y;         // [m, n] row stride ldy
  int64_t ldy;
};

template <Fmt F>
struct ScaleOf {
  using T = float;  // FP8: one f32 per row
};
template <>
struct ScaleOf<Fmt::kInt4F16> {
  using T = __half;
};
template <>
struct ScaleOf<Fmt::kInt4Bf16> {
  using T = __nv_bfloat16;
};

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// FP8 weights, exact: the hardware's e4m3x2 -> f16x2 convert (every E4M3 value, NaN included, is
// an f16), then f16 -> f32. Two elements per convert instead of one f16 build + convert each.
__device__ __forceinline__ void fp8x4_to_f32(uint32_t word, float (&out)[4]) {
  const float2 lo = __half22float2(__half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word & 0xffffu), __NV_E4M3)));
  const float2 hi = __half22float2(__half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> 16), __NV_E4M3)));
  out[0] = lo.x;
  out[1] = lo.y;
  out[2] = hi.x;
  out[3] = hi.y;
}

// kR consecutive output rows from row0 on, resolved once: which block each lives in, pointers to
// its bytes, scales, zeros and bias (null past n, or where the block has none).
template <typename ScaleT, int kR>
struct Rows {
  bool valid[kR];
  const uint8_t* w[kR];
  const ScaleT* s[kR];
  const int8_t* z[kR];
  const float* b[kR];

  __device__ __forceinline__ void resolve(const GemvArgs& a, int64_t row0, int64_t row_bytes,
                                          int64_t groups) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t g = row0 + r;
      valid[r] = g < a.n;
      int blk = 0;
      while (blk + 1 < a.n_blocks && g >= a.row_end[blk]) ++blk;
      const int64_t lr = g - (blk > 0 ? a.row_end[blk - 1] : 0);
      w[r] = valid[r] ? a.w[blk] + lr * row_bytes : nullptr;
      s[r] = valid[r] ? static_cast<const ScaleT*>(a.scales[blk]) + lr * groups : nullptr;
      z[r] = valid[r] && a.zeros[blk] ? a.zeros[blk] + lr * groups : nullptr;
      b[r] = valid[r] && a.bias[blk] ? a.bias[blk] + lr : nullptr;
    }
  }
};

// kM: rows of x the registers are sized for (>= m; rows past m are staged as zeros).
// kVec: 128-bit weight loads (see the header's alignment rule), else byte loads.
template <Fmt F, int kM, bool kVec>
__global__ void __launch_bounds__(kThreads) quant_gemv_kernel(const GemvArgs a) {
  constexpr bool kInt4 = F != Fmt::kFp8;
  constexpr int kE = kInt4 ? 32 : 16;                 // elements per 16-byte chunk
  constexpr int kTile = kWarpSize * kE;               // k elements per tile: a chunk per lane
  constexpr int kPitch = kTile + (kTile / kE) * 4;    // staged floats per x row (padded)
  using ScaleT = typename ScaleOf<F>::T;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);        // [kM][kPitch]

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int64_t row_bytes = kInt4 ? a.k / 2 : a.k;
  const int64_t groups = kInt4 ? (a.k >> a.group_shift) : 1;

  // This warp's rows, resolved once: block, pointers to the row's bytes, scales, zeros, bias.
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRowsPerWarp;
  Rows<ScaleT, kRowsPerWarp> rows;
  rows.resolve(a, row0, row_bytes, groups);

  // Loads this lane's chunk of every row for the tile starting at t0 (zeros past k or n).
  auto load = [&](uint4(&raw)[kRowsPerWarp], int64_t t0) {
    const int64_t c0 = t0 + static_cast<int64_t>(lane) * kE;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      raw[r] = make_uint4(0, 0, 0, 0);
      if (!rows.valid[r] || c0 >= a.k) continue;
      const uint8_t* p = rows.w[r] + (kInt4 ? c0 / 2 : c0);
      if constexpr (kVec) {
        raw[r] = __ldg(reinterpret_cast<const uint4*>(p));
      } else {
        uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < kChunkBytes; ++j) {
          // INT4 chunks are always whole (k % 32 == 0); an FP8 row may end mid-chunk.
          const uint32_t byte = (kInt4 || c0 + j < a.k) ? static_cast<uint32_t>(p[j]) : 0u;
          v[j / 4] |= byte << (8 * (j % 4));
        }
        raw[r] = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  };

  float acc[kRowsPerWarp][kM] = {};
  uint4 cur[kRowsPerWarp], nxt[kRowsPerWarp];
  load(cur, 0);
  for (int64_t t0 = 0; t0 < a.k; t0 += kTile) {
    if (t0 + kTile < a.k) load(nxt, t0 + kTile);  // in flight while this tile is multiplied
    __syncthreads();  // every warp is done reading the previous tile of x
    for (int idx = static_cast<int>(threadIdx.x); idx < kM * kTile; idx += kThreads) {
      const int i = idx / kTile, j = idx % kTile;
      const int64_t col = t0 + j;
      xs[i * kPitch + j + (j / kE) * 4] =
          (i < a.m && col < a.k) ? a.x[static_cast<int64_t>(i) * a.ldx + col] : 0.0f;
    }
    __syncthreads();
    const int64_t c0 = t0 + static_cast<int64_t>(lane) * kE;
    if (c0 < a.k) {
      const float* xl = xs + lane * (kE + 4);  // this lane's chunk of x row 0
      if constexpr (kInt4) {
        float scale[kRowsPerWarp], offset[kRowsPerWarp];
        float part[kRowsPerWarp][kM] = {};
        const int64_t grp = c0 >> a.group_shift;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          scale[r] = rows.valid[r] ? load_scale(rows.s[r], grp) : 0.0f;
          offset[r] = kMagic + 8.0f + (rows.z[r] ? static_cast<float>(rows.z[r][grp]) : 0.0f);
        }
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {  // 8 elements per 32-bit word
          float wf[kRowsPerWarp][8];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
            const uint32_t word = word_of(cur[r], wi) ^ 0x88888888u;
#pragma unroll
            for (int e = 0; e < 8; ++e) wf[r][e] = int4_minus_zero(word, e, offset[r]);
          }
#pragma unroll
          for (int i = 0; i < kM; ++i) {
            const float4 x0 = *reinterpret_cast<const float4*>(xl + i * kPitch + wi * 8);
            const float4 x1 = *reinterpret_cast<const float4*>(xl + i * kPitch + wi * 8 + 4);
            const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
              for (int e = 0; e < 8; ++e) part[r][i] = fmaf(xv[e], wf[r][e], part[r][i]);
            }
          }
        }
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
          for (int i = 0; i < kM; ++i) acc[r][i] = fmaf(scale[r], part[r][i], acc[r][i]);
        }
      } else {
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {  // 4 elements per 32-bit word
          float wf[kRowsPerWarp][4];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) fp8x4_to_f32(word_of(cur[r], wi), wf[r]);
#pragma unroll
          for (int i = 0; i < kM; ++i) {
            const float4 xv = *reinterpret_cast<const float4*>(xl + i * kPitch + wi * 4);
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
              acc[r][i] = fmaf(xv.x, wf[r][0], acc[r][i]);
              acc[r][i] = fmaf(xv.y, wf[r][1], acc[r][i]);
              acc[r][i] = fmaf(xv.z, wf[r][2], acc[r][i]);
              acc[r][i] = fmaf(xv.w, wf[r][3], acc[r][i]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) cur[r] = nxt[r];
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    // FP8: the per-row scale (the decode is exact and unscaled).
    float row_scale = 1.0f;
    if constexpr (!kInt4) row_scale = rows.valid[r] ? rows.s[r][0] : 0.0f;
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const float v = warp_sum(acc[r][i]) * row_scale;
      if (lane == i && i < a.m && rows.valid[r]) {
        a.y[static_cast<int64_t>(i) * a.ldy + row0 + r] = v + (rows.b[r] ? *rows.b[r] : 0.0f);
      }
    }
  }
}

template <Fmt F, int kM, bool kVec>
int launch(const GemvArgs& a, cudaStream_t stream) {
  constexpr int kE = F == Fmt::kFp8 ? 16 : 32;
  constexpr int kTile = kWarpSize * kE;
  constexpr size_t kShared = sizeof(float) * kM * (kTile + (kTile / kE) * 4);
  static_assert(kShared <= kDefaultSharedBytes, "x tile must fit without opt-in shared memory");
  const int64_t blocks = ceil_div(a.n, kRowsPerBlock);
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  quant_gemv_kernel<F, kM, kVec>
      <<<static_cast<unsigned>(blocks), kThreads, kShared, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

// ---- FP8, m <= 2: split-k GEMV -------------------------------------------------------------
// A block is kWR row groups of kWK warps. The kWK warps of a group share its kR output rows and
// split k between them (warp w takes 512-element tiles w, w + kWK, ...); each lane issues kU
// tiles x kR rows of 16-byte weight loads before it multiplies, and reads its x straight from
// global memory (L1-cached: every block reads the same x), so the k loop has no barrier. The
// warps' partial sums meet in shared memory and are added in a fixed order.
template <int kM, int kR, int kU, int kWK, int kWR>
__global__ void __launch_bounds__(kWK * kWR * kWarpSize) fp8_gemv_split_kernel(const GemvArgs a) {
  constexpr int kE = 16;  // FP8 elements per 16-byte chunk
  constexpr int kTile = kWarpSize * kE;
  __shared__ float red[kWR][kWK][kR][kM];

  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int wk = static_cast<int>(threadIdx.x) / kWarpSize % kWK;  // k slice
  const int wr = static_cast<int>(threadIdx.x) / kWarpSize / kWK;  // row group
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWR + wr) * kR;
  Rows<float, kR> rows;
  rows.resolve(a, row0, a.k, 1);

  float acc[kR][kM] = {};
  const int64_t n_tiles = (a.k + kTile - 1) / kTile;
  for (int64_t t = wk; t < n_tiles; t += static_cast<int64_t>(kWK) * kU) {
    uint4 raw[kU][kR];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t c0 = (t + static_cast<int64_t>(u) * kWK) * kTile + static_cast<int64_t>(lane) * kE;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        raw[u][r] = make_uint4(0, 0, 0, 0);
        if (rows.valid[r] && c0 < a.k) raw[u][r] = __ldg(reinterpret_cast<const uint4*>(rows.w[r] + c0));
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t c0 = (t + static_cast<int64_t>(u) * kWK) * kTile + static_cast<int64_t>(lane) * kE;
      if (c0 >= a.k) continue;  // k % 16 == 0: a chunk is whole or wholly past the end
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {  // 4 elements per 32-bit word
        float wf[kR][4];
#pragma unroll
        for (int r = 0; r < kR; ++r) fp8x4_to_f32(word_of(raw[u][r], wi), wf[r]);
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          float4 xv = make_float4(0, 0, 0, 0);
          if (i < a.m) xv = __ldg(reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(i) * a.ldx + c0 + wi * 4));
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            acc[r][i] = fmaf(xv.x, wf[r][0], acc[r][i]);
            acc[r][i] = fmaf(xv.y, wf[r][1], acc[r][i]);
            acc[r][i] = fmaf(xv.z, wf[r][2], acc[r][i]);
            acc[r][i] = fmaf(xv.w, wf[r][3], acc[r][i]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == 0) red[wr][wk][r][i] = v;
    }
  }
  __syncthreads();
  // Thread r * kM + i of the group writes y[i, row0 + r] (static indices keep `rows` in registers).
  const int tid = static_cast<int>(threadIdx.x) - wr * kWK * kWarpSize;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      if (tid != r * kM + i || i >= a.m || !rows.valid[r]) continue;
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWK; ++w) v += red[wr][w][r][i];
      a.y[static_cast<int64_t>(i) * a.ldy + row0 + r] = v * rows.s[r][0] + (rows.b[r] ? *rows.b[r] : 0.0f);
    }
  }
}

// Measured on an H200 (bench_cuda_gemm, Llama-3-8B shapes) against 8 other shapes: 4 rows per
// group, 2 tiles in flight, 2 k slices, 2 groups per block.
template <int kM>
int launch_fp8_split(const GemvArgs& a, cudaStream_t stream) {
  constexpr int kR = 4, kU = 2, kWK = 2, kWR = 2;
  const int64_t blocks = ceil_div(a.n, kR * kWR);
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  fp8_gemv_split_kernel<kM, kR, kU, kWK, kWR>
      <<<static_cast<unsigned>(blocks), kWK * kWR * kWarpSize, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <Fmt F>
int launch_format(const GemvArgs& a, bool vec, bool x_vec, cudaStream_t stream) {
  // The byte-wise fallback is rare (misaligned weights): one register shape keeps compile time down.
  if (!vec) return launch<F, 8, false>(a, stream);
  if constexpr (F == Fmt::kFp8) {
    if (a.m <= 1 && x_vec) return launch_fp8_split<1>(a, stream);
    if (a.m <= 2 && x_vec) return launch_fp8_split<2>(a, stream);
  }
  if (a.m <= 1) return launch<F, 1, true>(a, stream);
  if (a.m <= 2) return launch<F, 2, true>(a, stream);
  if (a.m <= 4) return launch<F, 4, true>(a, stream);
  return launch<F, 8, true>(a, stream);
}

}  // namespace

int quant_gemv(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
               int64_t ldy, cudaStream_t stream) {
  static_assert(kGemvMaxM <= 8, "register tiles are sized for at most 8 rows of x");
  if (m < 1 || m > kGemvMaxM || w.n_blocks < 1 || w.n_blocks > kMaxGemmBlocks || w.k < 1) {
    return cudaErrorInvalidValue;
  }
  GemvArgs a = {};
  a.n_blocks = w.n_blocks;
  a.k = w.k;
  a.m = static_cast<int>(m);
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  bool vec = true;
  int64_t end = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    a.w[b] = static_cast<const uint8_t*>(w.data[b]);
    a.scales[b] = w.scales[b];
    a.zeros[b] = w.dtype == DType::kI4 ? w.zeros[b] : nullptr;
    a.bias[b] = w.bias[b];
    end += w.rows[b];
    a.row_end[b] = end;
    if (!w.data[b] || !w.scales[b]) return cudaErrorInvalidValue;
    vec = vec && aligned16(w.data[b]);
  }
  a.n = end;
  if (a.n < 1) return cudaSuccess;
  // The split kernel reads x with 128-bit loads.
  const bool x_vec = aligned16(x) && ldx % 4 == 0;
  if (w.dtype == DType::kF8E4M3) {
    return launch_format<Fmt::kFp8>(a, vec && w.k % 16 == 0, x_vec, stream);
  }
  if (w.dtype != DType::kI4) return cudaErrorInvalidValue;
  switch (w.group_size) {
    case 32: a.group_shift = 5; break;
    case 64: a.group_shift = 6; break;
    case 128: a.group_shift = 7; break;
    default: return cudaErrorInvalidValue;
  }
  if (w.k % w.group_size != 0) return cudaErrorInvalidValue;
  if (w.scale_dtype == DType::kF16) return launch_format<Fmt::kInt4F16>(a, vec, x_vec, stream);
  if (w.scale_dtype == DType::kBF16) return launch_format<Fmt::kInt4Bf16>(a, vec, x_vec, stream);
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
