// The block-level core shared by attention_prefill.cu and attention_decode.cu, and the launch
// dispatch that instantiates their kernels (device code: included by .cu files only). A thread
// block of kThreads holds up to kMaxRows query rows that attend to keys of ONE sequence and ONE
// KV head: the tokens of a prefill run for one query head (prefill), or the query heads of one
// KV group for one token (decode, GQA: the KV is read once for the whole group). Row r sees keys
// [row_lo[r], row_hi[r]] (empty when lo > hi).
//
// Per tile of kKeyTile keys: every thread helps to read the K and V rows through the block table
// in the cache format, dequantizes them in registers and stores f32 into shared memory; then
// warp w updates the rows w, w + kWarps, ... it owns: lane j scores key j (q . k from shared
// memory), the online softmax keeps a running maximum per row (f32, as the CPU), and lane j
// accumulates output elements j, j + 32, ... of P V.
//
// Shared memory (tile_smem_bytes): q [rows, kD] (q * scale, zero past head_dim), K and V tiles
// [kKeyTile, kD + 4] (the +4 keeps lane j's float4 reads of key j on distinct banks, and the
// columns past head_dim are zero so padded dot products add nothing), then kIntArrays int
// arrays of kMaxRows.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_kv_format.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda::attn {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeyTile = 32;  // one key per lane in the score pass
constexpr int kMaxRows = 64;
constexpr int kIntArrays = 5;  // row_lo, row_hi and three the kernels use for their own lists
constexpr unsigned kFull = 0xffffffffu;

__host__ __device__ constexpr int key_stride(int kD) { return kD + 4; }

// launch_config.cuh's helpers are host-only constexpr; the kernels need their own.
__host__ __device__ constexpr int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ constexpr int64_t idiv_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Head dims are padded to the next of 32, 64, 128, 256 (0: unsupported).
__host__ __device__ constexpr int padded_head_dim(int64_t hd) {
  return hd <= 0 ? 0 : hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : hd <= 256 ? 256 : 0;
}

__host__ __device__ constexpr size_t tile_smem_bytes(int kD, int rows) {
  return (static_cast<size_t>(rows) * kD + 2 * static_cast<size_t>(kKeyTile) * key_stride(kD)) *
             sizeof(float) +
         static_cast<size_t>(kIntArrays) * kMaxRows * sizeof(int);
}

// Values per 4-byte word of a record's value area.
__host__ __device__ constexpr int values_per_word(KvFormat f) {
  switch (f) {
    case KvFormat::kF32: return 1;
    case KvFormat::kBF16: return 2;
    case KvFormat::kF8E4M3:
    case KvFormat::kI8: return 4;
    case KvFormat::kI4: return 8;
  }
  return 1;
}

// Whether records can be read in aligned 4-byte words: the pools are 4-byte aligned and
// head_dim fills whole words, which also puts the scales and i4 parameters on 4-byte
// boundaries (kv_head_bytes is then a multiple of 4). Otherwise values are read one at a time.
inline bool kv_word_reads(const PagedKv& c, int64_t head_dim) {
  return reinterpret_cast<uintptr_t>(c.k) % 4 == 0 && reinterpret_cast<uintptr_t>(c.v) % 4 == 0 &&
         head_dim % values_per_word(c.format) == 0;
}

// One KV head of one sequence, as the loader reads it.
struct KvHeadView {
  const uint8_t* k = nullptr;  // pool base + kv_head * head_bytes
  const uint8_t* v = nullptr;
  int64_t row_bytes = 0;
  const int32_t* table_row = nullptr;  // [max_blocks] the sequence's block table row
  int64_t block_size = 0;
  int64_t n_blocks = 0;
  int hd = 0;
  bool word = false;  // kv_word_reads
};

// KV head kvh of a pool in format F; table_row is left for the caller (one sequence per token
// in decode, per run in prefill).
template <KvFormat F>
__device__ __forceinline__ KvHeadView kv_head_view(const PagedKv& c, int64_t n_kv_heads,
                                                   int64_t kvh, int hd, bool word) {
  const int64_t head_bytes = kv_head_bytes(F, hd);
  KvHeadView kv;
  kv.k = static_cast<const uint8_t*>(c.k) + kvh * head_bytes;
  kv.v = static_cast<const uint8_t*>(c.v) + kvh * head_bytes;
  kv.row_bytes = n_kv_heads * head_bytes;
  kv.block_size = c.block_size;
  kv.n_blocks = c.n_blocks;
  kv.hd = hd;
  kv.word = word;
  return kv;
}

// The block table row of sequence seq (a valid id: the token flags checked it).
__device__ __forceinline__ const int32_t* kv_table_row(const PagedKv& c, int seq) {
  return c.block_tables + static_cast<int64_t>(seq) * c.max_blocks;
}

// Word w of a record's value area -> its values_per_word(F) values, dequantized.
template <KvFormat F>
__device__ __forceinline__ void decode_word(const uint8_t* rec, int w, int hd, float* x) {
  const uint32_t u = reinterpret_cast<const uint32_t*>(rec)[w];
  if constexpr (F == KvFormat::kF32) {
    x[0] = __uint_as_float(u);
  } else if constexpr (F == KvFormat::kBF16) {
    x[0] = kv_bf16_to_f32(u & 0xffffu);  // element 2w is the lower address: little endian
    x[1] = kv_bf16_to_f32(u >> 16);
  } else if constexpr (F == KvFormat::kF8E4M3 || F == KvFormat::kI8) {
    const float scale = *reinterpret_cast<const float*>(rec + hd);  // aligned: hd % 4 == 0
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t b = (u >> (8 * e)) & 0xffu;
      const float q = F == KvFormat::kI8 ? static_cast<float>(static_cast<int8_t>(b))
                                         : kv_e4m3_to_f32(b);
      x[e] = q * scale;
    }
  } else {
    // Eight elements 8w .. 8w+7, one group (groups are 32 values or the whole head).
    const int group = 8 * w / static_cast<int>(kv_i4_group(hd));
    const uint32_t par = *reinterpret_cast<const uint32_t*>(rec + hd / 2 + group * 4);
    const float s = kv_f16_to_f32(par & 0xffffu), m = kv_f16_to_f32(par >> 16);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = fmaf(static_cast<float>((u >> (4 * e)) & 0xfu), s, m);
  }
}

// Element d of a record, any alignment (head_dim that does not fill whole words).
template <KvFormat F>
__device__ __forceinline__ float decode_value(const uint8_t* rec, int d, int hd) {
  if constexpr (F == KvFormat::kF32) {
    return kv_load_f32(rec + 4 * d);
  } else if constexpr (F == KvFormat::kBF16) {
    return kv_bf16_to_f32(kv_load_u16(rec + 2 * d));
  } else if constexpr (F == KvFormat::kF8E4M3) {
    return kv_e4m3_to_f32(rec[d]) * kv_load_f32(rec + hd);
  } else if constexpr (F == KvFormat::kI8) {
    return static_cast<float>(static_cast<int8_t>(rec[d])) * kv_load_f32(rec + hd);
  } else {
    const uint8_t* par = rec + (hd + 1) / 2 + d / static_cast<int>(kv_i4_group(hd)) * 4;
    const float u = static_cast<float>((rec[d / 2] >> (4 * (d & 1))) & 0xfu);
    return fmaf(u, kv_f16_to_f32(kv_load_u16(par)), kv_f16_to_f32(kv_load_u16(par + 2)));
  }
}

// The record of key position j, or null when j is past `last` or its block id is outside the
// pool (then the key reads as zeros: finite, so masked keys add exactly nothing).
__device__ __forceinline__ int64_t key_offset(const KvHeadView& kv, int64_t j, int64_t last) {
  if (j > last) return -1;
  const int64_t block = kv.table_row[j / kv.block_size];
  if (block < 0 || block >= kv.n_blocks) return -1;
  return (block * kv.block_size + j % kv.block_size) * kv.row_bytes;
}

// K and V of keys j0 .. j0 + kKeyTile - 1 (those past `last` as zeros) into k_s, v_s
// [kKeyTile, key_stride(kD)], columns [0, hd). Called by the whole block.
template <KvFormat F, int kD>
__device__ void load_tile(const KvHeadView& kv, int64_t j0, int64_t last,
                          float* __restrict__ k_s, float* __restrict__ v_s) {
  constexpr int kS = key_stride(kD);
  if (kv.word) {
    constexpr int kPer = values_per_word(F);
    const int words = kv.hd / kPer;
    for (int it = threadIdx.x; it < kKeyTile * words; it += kThreads) {
      const int i = it / words, w = it - i * words;
      const int64_t off = key_offset(kv, j0 + i, last);
      float kx[kPer], vx[kPer];
      if (off >= 0) {
        decode_word<F>(kv.k + off, w, kv.hd, kx);
        decode_word<F>(kv.v + off, w, kv.hd, vx);
      } else {
#pragma unroll
        for (int e = 0; e < kPer; ++e) kx[e] = vx[e] = 0.0f;
      }
      // Whole float2 / float4 stores: w * kPer floats into a row of kS (a multiple of 4) floats
      // is aligned to the store's width.
      float* kd = k_s + i * kS + w * kPer;
      float* vd = v_s + i * kS + w * kPer;
      if constexpr (kPer == 1) {
        *kd = kx[0];
        *vd = vx[0];
      } else if constexpr (kPer == 2) {
        *reinterpret_cast<float2*>(kd) = make_float2(kx[0], kx[1]);
        *reinterpret_cast<float2*>(vd) = make_float2(vx[0], vx[1]);
      } else {
#pragma unroll
        for (int e = 0; e < kPer; e += 4) {
          *reinterpret_cast<float4*>(kd + e) = make_float4(kx[e], kx[e + 1], kx[e + 2], kx[e + 3]);
          *reinterpret_cast<float4*>(vd + e) = make_float4(vx[e], vx[e + 1], vx[e + 2], vx[e + 3]);
        }
      }
    }
  } else {
    for (int it = threadIdx.x; it < kKeyTile * kv.hd; it += kThreads) {
      const int i = it / kv.hd, d = it - i * kv.hd;
      const int64_t off = key_offset(kv, j0 + i, last);
      k_s[i * kS + d] = off >= 0 ? decode_value<F>(kv.k + off, d, kv.hd) : 0.0f;
      v_s[i * kS + d] = off >= 0 ? decode_value<F>(kv.v + off, d, kv.hd) : 0.0f;
    }
  }
}

// Zeroes the columns [hd, kD) of both key tiles, which load_tile never writes.
template <int kD>
__device__ void zero_tile_padding(int hd, float* k_s, float* v_s) {
  constexpr int kS = key_stride(kD);
  const int pad = kD - hd;
  for (int it = threadIdx.x; it < kKeyTile * pad; it += kThreads) {
    const int i = it / pad, c = hd + (it - i * pad);
    k_s[i * kS + c] = 0.0f;
    v_s[i * kS + c] = 0.0f;
  }
}

// Online-softmax state of the kRpw rows a warp owns (rows warp + kWarps * i). m is the running
// maximum (the same in every lane), l a per-lane share of the running sum (summed at the end),
// o[i][c] the unnormalised output element lane + 32 c.
template <int kD, int kRpw>
struct RowAcc {
  float m[kRpw];
  float l[kRpw];
  float o[kRpw][kD / 32];

  __device__ void init() {
#pragma unroll
    for (int i = 0; i < kRpw; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.0f;
#pragma unroll
      for (int c = 0; c < kD / 32; ++c) o[i][c] = 0.0f;
    }
  }
};

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

using cuda::warp_sum;  // block_reduce.cuh's shuffle tree

// One key tile (keys j0 ..) for the calling warp's rows. q_s: [rows, kD] with rows >
// the largest row index below n_rows. Called by every warp (no barrier inside).
template <int kD, int kRpw>
__device__ __forceinline__ void attend_tile(const float* __restrict__ q_s,
                                            const float* __restrict__ k_s,
                                            const float* __restrict__ v_s,
                                            const int* __restrict__ row_lo,
                                            const int* __restrict__ row_hi, int n_rows,
                                            int64_t j0, RowAcc<kD, kRpw>& acc) {
  constexpr int kS = key_stride(kD);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  // Warp-uniform: which of the warp's rows see any key of this tile.
  bool live[kRpw];
  bool any = false;
#pragma unroll
  for (int i = 0; i < kRpw; ++i) {
    const int r = warp + kWarps * i;
    live[i] = r < n_rows && row_lo[r] <= row_hi[r] && row_lo[r] <= j0 + kKeyTile - 1 &&
              row_hi[r] >= j0;
    any |= live[i];
  }
  if (!any) return;

  float s[kRpw];
#pragma unroll
  for (int i = 0; i < kRpw; ++i) s[i] = 0.0f;
  const float* kr = k_s + lane * kS;
#pragma unroll 8
  for (int d = 0; d < kD; d += 4) {
    const float4 k4 = *reinterpret_cast<const float4*>(kr + d);
#pragma unroll
    for (int i = 0; i < kRpw; ++i) {
      if (!live[i]) continue;
      const float4 q4 = *reinterpret_cast<const float4*>(q_s + (warp + kWarps * i) * kD + d);
      s[i] = fmaf(q4.x, k4.x, s[i]);
      s[i] = fmaf(q4.y, k4.y, s[i]);
      s[i] = fmaf(q4.z, k4.z, s[i]);
      s[i] = fmaf(q4.w, k4.w, s[i]);
    }
  }

  const int64_t j = j0 + lane;
#pragma unroll
  for (int i = 0; i < kRpw; ++i) {
    if (!live[i]) {
      s[i] = 0.0f;
      continue;
    }
    const int r = warp + kWarps * i;
    const float x = j >= row_lo[r] && j <= row_hi[r] ? s[i] : -INFINITY;
    const float m_new = fmaxf(acc.m[i], warp_max(x));
    float p = 0.0f;
    // All scores so far -inf (only with infinite inputs): nothing to add, and
    // e^(-inf - -inf) would be NaN.
    if (m_new != -INFINITY) {
      p = expf(x - m_new);                        // a masked key: e^-inf = 0
      const float corr = expf(acc.m[i] - m_new);  // 0 on the row's first keys, else <= 1
      acc.l[i] = acc.l[i] * corr + p;
#pragma unroll
      for (int c = 0; c < kD / 32; ++c) acc.o[i][c] *= corr;
      acc.m[i] = m_new;
    }
    s[i] = p;
  }

#pragma unroll 4
  for (int jj = 0; jj < kKeyTile; ++jj) {
    float vv[kD / 32];
#pragma unroll
    for (int c = 0; c < kD / 32; ++c) vv[c] = v_s[jj * kS + lane + 32 * c];
#pragma unroll
    for (int i = 0; i < kRpw; ++i) {
      if (!live[i]) continue;
      const float p = __shfl_sync(kFull, s[i], jj);
#pragma unroll
      for (int c = 0; c < kD / 32; ++c) acc.o[i][c] = fmaf(p, vv[c], acc.o[i][c]);
    }
  }
}

// Keys [first, last] tile by tile into acc. Called by the whole block. The leading barrier
// publishes what the caller wrote to shared memory (q_s, the padding, row_lo / row_hi) and keeps
// a tile from being overwritten while a warp still reads it; the second publishes the tile.
template <KvFormat F, int kD, int kRpw>
__device__ __forceinline__ void attend_keys(const KvHeadView& kv, int64_t first, int64_t last,
                                            const float* q_s, float* k_s, float* v_s,
                                            const int* row_lo, const int* row_hi, int n_rows,
                                            RowAcc<kD, kRpw>& acc) {
  for (int64_t j0 = first; j0 <= last; j0 += kKeyTile) {
    __syncthreads();
    load_tile<F, kD>(kv, j0, last, k_s, v_s);
    __syncthreads();
    attend_tile<kD, kRpw>(q_s, k_s, v_s, row_lo, row_hi, n_rows, j0, acc);
  }
}

// Writes row i of the calling warp's accumulators, normalised, to y[0, hd) (the CPU's
// acc * (1 / sum), and zeros when the sum is 0).
template <int kD, int kRpw>
__device__ __forceinline__ void store_row(const RowAcc<kD, kRpw>& acc, int i, int hd, float* y) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const float l = warp_sum(acc.l[i]);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int c = 0; c < kD / 32; ++c) {
    if (lane + 32 * c < hd) y[lane + 32 * c] = acc.o[i][c] * inv;
  }
}

// NaN in y[0, hd): the result of a token whose indices were bad (see attention_token_flags).
__device__ __forceinline__ void store_nan_row(int hd, float* y) {
  for (int d = static_cast<int>(threadIdx.x) & 31; d < hd; d += 32) y[d] = __int_as_float(0x7fc00000);
}

// Over 48 KiB of dynamic shared memory (head_dim 128 with 64 rows: 66 KiB, 256: 131 KiB)
// needs the per-kernel opt-in; Hopper allows 227 KiB. Returns a cudaError_t.
template <class Kernel>
int allow_smem(Kernel* kernel, size_t smem) {
  if (smem <= kDefaultSharedBytes) return cudaSuccess;
  return static_cast<int>(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}

template <KvFormat F>
using FormatTag = std::integral_constant<KvFormat, F>;
template <int kD>
using HeadDimTag = std::integral_constant<int, kD>;

template <KvFormat F, class Launch>
int dispatch_head_dim(int64_t head_dim, const Launch& launch) {
  switch (padded_head_dim(head_dim)) {
    case 32: return launch(FormatTag<F>{}, HeadDimTag<32>{});
    case 64: return launch(FormatTag<F>{}, HeadDimTag<64>{});
    case 128: return launch(FormatTag<F>{}, HeadDimTag<128>{});
    case 256: return launch(FormatTag<F>{}, HeadDimTag<256>{});
    default: return cudaErrorInvalidValue;
  }
}

// The one list of (format, padded head dim) pairs the attention kernels are instantiated for:
// returns launch(FormatTag<F>{}, HeadDimTag<kD>{}) for the cache's format and padded head_dim,
// or cudaErrorInvalidValue when padded_head_dim is 0. No default: -Wswitch names a new format.
template <class Launch>
int dispatch_kv(KvFormat format, int64_t head_dim, const Launch& launch) {
  switch (format) {
    case KvFormat::kF32: return dispatch_head_dim<KvFormat::kF32>(head_dim, launch);
    case KvFormat::kBF16: return dispatch_head_dim<KvFormat::kBF16>(head_dim, launch);
    case KvFormat::kF8E4M3: return dispatch_head_dim<KvFormat::kF8E4M3>(head_dim, launch);
    case KvFormat::kI8: return dispatch_head_dim<KvFormat::kI8>(head_dim, launch);
    case KvFormat::kI4: return dispatch_head_dim<KvFormat::kI4>(head_dim, launch);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda::attn
