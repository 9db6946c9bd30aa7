// W4A16 / W8A16 GEMV; the design is described in gemm_gemv_quant.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/gemm_cublas.cuh"
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

// The split-k kernels' end: each warp's sums (warp-shuffle tree) meet in shared memory, and
// thread r * kM + i of the row group adds its kWK warps' partials in a fixed order and writes
// y[i, row0 + r] (static indices keep `rows` in registers), times the row's scale where
// kRowScale (FP8: one f32 per row), plus the bias. Reached by every thread of the block.
template <int kM, int kR, int kWK, int kWR, bool kRowScale, typename ScaleT>
__device__ __forceinline__ void split_finish(const GemvArgs& a, const Rows<ScaleT, kR>& rows,
                                             int64_t row0, float (&acc)[kR][kM],
                                             float (&red)[kWR][kWK][kR][kM], int wr, int wk,
                                             int lane) {
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == 0) red[wr][wk][r][i] = v;
    }
  }
  __syncthreads();
  const int tid = static_cast<int>(threadIdx.x) - wr * kWK * kWarpSize;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      if (tid != r * kM + i || i >= a.m || !rows.valid[r]) continue;
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWK; ++w) v += red[wr][w][r][i];
      float* out = a.y + static_cast<int64_t>(i) * a.ldy + row0 + r;
      if constexpr (kRowScale) {
        *out = v * rows.s[r][0] + (rows.b[r] ? *rows.b[r] : 0.0f);
      } else {
        *out = v + (rows.b[r] ? *rows.b[r] : 0.0f);
      }
    }
  }
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

  split_finish<kM, kR, kWK, kWR, true>(a, rows, row0, acc, red, wr, wk, lane);
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

// ---- INT4: x rounded per group to x16, integer dot products --------------------------------
// As the CPU's int4 decode kernels do (gemm_quant.h): x16 = rint(x * (32639 / absmax_g)) per
// (row of x, weight group), s_x = absmax_g / 32639, both in f32 with the CPU's operations, so the
// x16 and s_x bits equal the CPU's. Each 8 consecutive x16 are stored as {0,2,4,6,1,3,5,7}: the
// order in which `w & 0x0f0f0f0f` and `(w >> 4) & 0x0f0f0f0f` hold a 32-bit word's nibbles, so
// four dp2a (int16 x int8 pairs, int32 sums) take a word's 8 products. Per 32-element chunk the
// quantize kernel also stores sum(x16), for the zero point: sum x16 (u - 8 - z) with u = q + 8.
constexpr int kI4XMaxInt = 32639;
constexpr int kI4Chunk = 32;  // elements per 16-byte weight chunk (one lane's load)

struct I4XView {
  const uint4* x16;     // [m][k / 8] 8 permuted x16 each
  const float* sx;      // [m][k / group]
  const int* xsum;      // [m][k / 32]
};

// One thread per 8 elements of a row of x; a group's G / 8 threads are adjacent lanes of a warp.
__global__ void __launch_bounds__(128) i4_quantize_x_kernel(const float* x, int64_t ldx, int64_t k,
                                                            int group_shift, uint4* x16, float* sx,
                                                            int* xsum) {
  const int64_t i = blockIdx.y;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  const bool live = c0 < k;  // k % 32 == 0: 8 elements are all in or all out
  float v[8];
  float amax = 0.0f;
  bool bad = false;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    v[e] = live ? x[i * ldx + c0 + e] : 0.0f;
    amax = fmaxf(amax, fabsf(v[e]));
    bad = bad || !isfinite(v[e]);
  }
  const int lanes = (1 << group_shift) / 8;
  for (int o = 1; o < lanes; o <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    bad = __shfl_xor_sync(0xffffffffu, static_cast<int>(bad), o) != 0 || bad;
  }
  float s = 0.0f, inv = 0.0f;
  if (bad) {
    s = __int_as_float(0x7fc00000);
  } else if (amax > 0.0f) {
    s = __fdiv_rn(amax, static_cast<float>(kI4XMaxInt));
    inv = __fdiv_rn(static_cast<float>(kI4XMaxInt), amax);
  }
  int q[8];
  int sum = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    q[e] = __float2int_rn(__fmul_rn(v[e], inv));  // NaN * 0 -> 0, as the CPU's 0 * inf
    sum += q[e];
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (!live) return;
  auto pack = [](int a, int b) { return (static_cast<uint32_t>(a) & 0xffffu) | (static_cast<uint32_t>(b) << 16); };
  x16[(i * k + c0) / 8] = make_uint4(pack(q[0], q[2]), pack(q[4], q[6]), pack(q[1], q[3]), pack(q[5], q[7]));
  if ((threadIdx.x & 3) == 0) xsum[i * (k / kI4Chunk) + c0 / kI4Chunk] = sum;
  if ((threadIdx.x & (lanes - 1)) == 0) sx[(i * k + c0) >> group_shift] = s;
}

// Split-k as the FP8 kernel: kWR row groups of kWK warps, kR rows per group, kU chunks per lane in
// flight; a lane's 16-byte chunk is 32 elements of one group.
template <typename ScaleT, int kM, int kR, int kU, int kWK, int kWR>
__global__ void __launch_bounds__(kWK * kWR * kWarpSize) i4_gemv_split_kernel(const GemvArgs a,
                                                                              const I4XView xv) {
  constexpr int kTile = kWarpSize * kI4Chunk;
  __shared__ float red[kWR][kWK][kR][kM];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int wk = static_cast<int>(threadIdx.x) / kWarpSize % kWK;
  const int wr = static_cast<int>(threadIdx.x) / kWarpSize / kWK;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWR + wr) * kR;
  const int64_t groups = a.k >> a.group_shift;
  const int64_t chunks = a.k / kI4Chunk;
  Rows<ScaleT, kR> rows;
  rows.resolve(a, row0, a.k / 2, groups);

  float acc[kR][kM] = {};
  const int64_t n_tiles = (a.k + kTile - 1) / kTile;
  for (int64_t t = wk; t < n_tiles; t += static_cast<int64_t>(kWK) * kU) {
    // Everything the chunk needs from memory is requested before any of it is used: weights,
    // their scales and zero points (DRAM), x's scales and sums (L2); only x16 is read later.
    uint4 raw[kU][kR];
    float sw[kU][kR];
    int off[kU][kR];
    float sxi[kU][kM];
    int xs[kU][kM];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t c0 = (t + static_cast<int64_t>(u) * kWK) * kTile + static_cast<int64_t>(lane) * kI4Chunk;
      const bool in = c0 < a.k;
      const int64_t grp = in ? c0 >> a.group_shift : 0;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const bool ok = rows.valid[r] && in;
        raw[u][r] = ok ? __ldg(reinterpret_cast<const uint4*>(rows.w[r] + c0 / 2)) : make_uint4(0, 0, 0, 0);
        sw[u][r] = ok ? load_scale(rows.s[r], grp) : 0.0f;
        off[u][r] = 8 + (ok && rows.z[r] ? static_cast<int>(rows.z[r][grp]) : 0);
      }
#pragma unroll
      for (int i = 0; i < kM; ++i) {
        const bool ok = i < a.m && in;
        sxi[u][i] = ok ? __ldg(xv.sx + i * groups + grp) : 0.0f;
        xs[u][i] = ok ? __ldg(xv.xsum + i * chunks + c0 / kI4Chunk) : 0;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t c0 = (t + static_cast<int64_t>(u) * kWK) * kTile + static_cast<int64_t>(lane) * kI4Chunk;
      if (c0 >= a.k) continue;
      int d[kR][kM] = {};
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {
        uint4 xq[kM];
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          xq[i] = i < a.m ? __ldg(xv.x16 + (static_cast<int64_t>(i) * a.k + c0) / 8 + wi) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const uint32_t w8 = word_of(raw[u][r], wi) ^ 0x88888888u;  // u = q + 8 per nibble
          const int lo = static_cast<int>(w8 & 0x0f0f0f0fu);
          const int hi = static_cast<int>((w8 >> 4) & 0x0f0f0f0fu);
#pragma unroll
          for (int i = 0; i < kM; ++i) {
            d[r][i] = __dp2a_lo(static_cast<int>(xq[i].x), lo, d[r][i]);
            d[r][i] = __dp2a_hi(static_cast<int>(xq[i].y), lo, d[r][i]);
            d[r][i] = __dp2a_lo(static_cast<int>(xq[i].z), hi, d[r][i]);
            d[r][i] = __dp2a_hi(static_cast<int>(xq[i].w), hi, d[r][i]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          // |d - off xs| <= 32 * 32639 * 23: exact in int32; one f32 rounding in the convert.
          acc[r][i] = fmaf(sw[u][r] * sxi[u][i], static_cast<float>(d[r][i] - off[u][r] * xs[u][i]), acc[r][i]);
        }
      }
    }
  }

  split_finish<kM, kR, kWK, kWR, false>(a, rows, row0, acc, red, wr, wk, lane);
}

template <typename ScaleT, int kM, int kR, int kU, int kWK, int kWR>
int launch_i4_split(const GemvArgs& a, const I4XView& xv, cudaStream_t stream) {
  const int64_t blocks = ceil_div(a.n, kR * kWR);
  if (blocks > kMaxGridX) return cudaErrorInvalidConfiguration;
  i4_gemv_split_kernel<ScaleT, kM, kR, kU, kWK, kWR>
      <<<static_cast<unsigned>(blocks), kWK * kWR * kWarpSize, 0, stream>>>(a, xv);
  return static_cast<int>(cudaGetLastError());
}

template <Fmt F>
int launch_i4_dot(const GemvArgs& a, cudaStream_t stream) {
  using ScaleT = typename ScaleOf<F>::T;
  const int64_t groups = a.k >> a.group_shift;
  const size_t x16_bytes = static_cast<size_t>(a.m) * a.k * 2;
  const size_t sx_bytes = static_cast<size_t>(a.m) * groups * 4;
  const size_t xs_bytes = static_cast<size_t>(a.m) * (a.k / kI4Chunk) * 4;
  GemmScratch s;
  if (const int e = s.allocate(x16_bytes + sx_bytes + xs_bytes, stream)) return e;
  auto* base = static_cast<uint8_t*>(s.data());
  auto* x16 = reinterpret_cast<uint4*>(base);
  auto* sx = reinterpret_cast<float*>(base + x16_bytes);
  auto* xsum = reinterpret_cast<int*>(base + x16_bytes + sx_bytes);
  const dim3 qgrid(static_cast<unsigned>(ceil_div(a.k / 8, 128)), static_cast<unsigned>(a.m));
  i4_quantize_x_kernel<<<qgrid, 128, 0, stream>>>(a.x, a.ldx, a.k, a.group_shift, x16, sx, xsum);
  if (const int e = static_cast<int>(cudaGetLastError())) return e;
  const I4XView xv{x16, sx, xsum};
  // Measured on an H200 (bench_cuda_gemm, Llama-3-8B shapes) against 5 other shapes: 4 rows per
  // warp, 2 chunks in flight (1 at m = 8, for registers), no k split, 4 warps per block.
  if (a.m <= 1) return launch_i4_split<ScaleT, 1, 4, 2, 1, 4>(a, xv, stream);
  if (a.m <= 2) return launch_i4_split<ScaleT, 2, 4, 2, 1, 4>(a, xv, stream);
  if (a.m <= 4) return launch_i4_split<ScaleT, 4, 4, 2, 1, 4>(a, xv, stream);
  return launch_i4_split<ScaleT, 8, 4, 1, 1, 4>(a, xv, stream);
}

template <Fmt F>
int launch_format(const GemvArgs& a, bool vec, bool x_vec, cudaStream_t stream) {
  // The byte-wise fallback is rare (misaligned weights): one register shape keeps compile time down.
  if (!vec) return launch<F, 8, false>(a, stream);
  if constexpr (F != Fmt::kFp8) {
    return launch_i4_dot<F>(a, stream);
  } else {
    if (a.m <= 1 && x_vec) return launch_fp8_split<1>(a, stream);
    if (a.m <= 2 && x_vec) return launch_fp8_split<2>(a, stream);
    if (a.m <= 1) return launch<F, 1, true>(a, stream);
    if (a.m <= 2) return launch<F, 2, true>(a, stream);
    if (a.m <= 4) return launch<F, 4, true>(a, stream);
    return launch<F, 8, true>(a, stream);
  }
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
