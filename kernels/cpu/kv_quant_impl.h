// The attention inner loop (attention_impl.h states its contract and shape) over every KV-cache
// format; instantiated in attention_cpu.cc (AVX2) and attention_avx512.cc. (int4 / int8 caches
// at head sizes 64 / 128 take an integer loop instead unless GemmPrecision is kF32:
// attention_int_avx512_vnni.cc on AVX512-VNNI CPUs, attention_int_avx2.cc on CPUs without
// AVX-512.) K and V are read
// straight from the cache rows, through the block table, and dequantized in registers inside the
// q.k dot products and the V accumulation, each vector once for up to 8 heads of a group.
// Nothing is copied, f32 included: with the next block's rows asked for into L2 while a block is
// computed (SpreadPrefetch) and the scores below, this loop beat the former f32 loop (one KV head
// per range, its rows gathered into packed scratch) at every case of bench_attention on an
// AVX-512 core, 1 / 2 threads: decode of one 4096-key sequence from memory 1.27 / 1.26x (in
// cache 1.6x), a batch of 64 x 256 from memory 1.14 / 1.28x, a 512-token prefill 1.1 / 1.37x;
// at the AVX2 level 1.3x, 1.1-1.3x and 1.0-1.2x.
// A range takes all KV heads of its token (the rows are read whole): measured in `sampan bench
// --profile` (int4 weights, 1900 cached tokens, 2 threads) against one KV head per range,
// attention per token bf16 6.3-6.4 ms against 6.6-7.7, int4 4.1 against 4.5.
//
// Scores: on AVX-512 with a head size that is a multiple of 32 (kScoresKeysInLanes), 16 keys'
// records are transposed at a time so that the scores sum with the keys in the lanes
// (attention_scores_kt.h); elsewhere each (head, key) sums in its own vector and one
// transpose_sum per head gives 16 (8) scores.
// Per-row scales (kI8, kF8E4M3) stay out of the inner loops: a key's scale multiplies its score
// once, a value's scale is folded into its softmax weight. kI4's per-group scale and minimum are
// applied per vector (u * scale + min, one FMA).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/attention_scores_kt.h"
#include "kernels/cpu/kv_quant.h"

namespace sampan::cpu {
namespace {

// Vector reads of one head record (kv_quant.h layout) of head_dim hd.
//  load(r, d, hd): the kWidth values from element d (d + kWidth <= hd), reading no byte past
//    them; tail(r, d, hd): the last hd - d < kWidth values, zeros after.
//  Both leave out the row scale of kI8 / kF8E4M3 (row_scale(r, hd)); kF8E4M3 values come out
//  times 2^-8 and its row_scale times 2^8 (the f16 route below yields c * 2^-8; the power of two
//  moves into the one product per key or value, so every score and weighted value is the same
//  f32 as with c and the plain scale, barring scales above 2^119).
template <class S, KvDtype D>
struct KvLoad {
  using V = typename S::V;
  static constexpr int kW = S::kWidth;
  static constexpr bool kRowScale = D == KvDtype::kI8 || D == KvDtype::kF8E4M3;

  static float row_scale(const uint8_t* r, int64_t hd) {
    if constexpr (D == KvDtype::kF8E4M3) return kv_load_f32(r + hd) * 256.0f;
    return kRowScale ? kv_load_f32(r + hd) : 1.0f;
  }

  // kI4: the (scale, min) pair of the group holding element d; a group never straddles a vector
  // (groups of 32, or one group for the whole head).
  static const uint8_t* i4_params(const uint8_t* r, int64_t d, int64_t hd) {
    return r + (hd + 1) / 2 + ((hd & (kKvI4Group - 1)) != 0 ? 0 : d / kKvI4Group * 4);
  }

  static V load(const uint8_t* r, int64_t d, int64_t hd) {
    if constexpr (kW == 16) {
      return load16(r, d, hd);
    } else {
      return load8(r, d, hd);
    }
  }

  static V tail(const uint8_t* r, int64_t d, int64_t hd) {
    alignas(64) float buf[kW] = {};
    const int n = hd - d < kW ? static_cast<int>(hd - d) : kW;
    for (int j = 0; j < n; ++j) {
      const int64_t i = d + j;
      float x = 0.0f;
      if constexpr (D == KvDtype::kF32) {
        std::memcpy(&x, r + 4 * i, 4);
      } else if constexpr (D == KvDtype::kBF16) {
        x = kv_bf16_to_f32(kv_load_u16(r + 2 * i));
      } else if constexpr (D == KvDtype::kI8) {
        x = static_cast<float>(static_cast<int8_t>(r[i]));
      } else if constexpr (D == KvDtype::kF8E4M3) {
        x = kv_e4m3_to_f32(r[i]) * 0x1p-8f;
      } else {
        const uint8_t* p = i4_params(r, i, hd);
        const int u = (r[i / 2] >> (4 * (i & 1))) & 0xf;
        x = std::fma(static_cast<float>(u), kv_f16_to_f32(kv_load_u16(p)),
                     kv_f16_to_f32(kv_load_u16(p + 2)));
      }
      buf[j] = x;
    }
    return S::load(buf);
  }

  static __m512 load16(const uint8_t* r, int64_t d, int64_t hd) {
    if constexpr (D == KvDtype::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(r) + d);
    } else if constexpr (D == KvDtype::kBF16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 2 * d));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else if constexpr (D == KvDtype::kI8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + d));
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    } else if constexpr (D == KvDtype::kF8E4M3) {
      // The f16 route of load8 below on 16 codes: the 16 bytes broadcast to both 128-bit lanes,
      // vpshufb puts byte j in the high byte of 16-bit lane j (bytes 0-7 from the low lane, 8-15
      // from the high one), then the same shift, and, vcvtph2ps: c * 2^-8, exact for every code.
      // 4 vector instructions (plus the conversion's two uops) for the 11 of the normal /
      // subnormal blend it replaced.
      const __m256i b = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + d)));
      const __m256i hi = _mm256_shuffle_epi8(
          b, _mm256_setr_epi8(-128, 0, -128, 1, -128, 2, -128, 3, -128, 4, -128, 5, -128, 6, -128,
                              7, -128, 8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128,
                              14, -128, 15));
      const __m256i h = _mm256_and_si256(_mm256_srai_epi16(hi, 1),
                                         _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
      return _mm512_cvtph_ps(h);
    } else {
      // As load8: element j of the 16 is nibble j % 8 of 32-bit word j / 8, each word broadcast
      // to its half of the lanes, one variable shift and a mask; the group's (scale, min) f16
      // pair converted by one vcvtph2ps and spread by two in-lane shuffles.
      uint32_t w0, w1, sm;
      std::memcpy(&w0, r + d / 2, 4);
      std::memcpy(&w1, r + d / 2 + 4, 4);
      std::memcpy(&sm, i4_params(r, d, hd), 4);
      const __m512i w = _mm512_inserti32x8(_mm512_set1_epi32(static_cast<int>(w0)),
                                           _mm256_set1_epi32(static_cast<int>(w1)), 1);
      const __m512i u = _mm512_and_si512(
          _mm512_srlv_epi32(w, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16,
                                                 20, 24, 28)),
          _mm512_set1_epi32(0xf));
      const __m512 f = _mm512_cvtph_ps(_mm256_set1_epi32(static_cast<int>(sm)));  // s, m, s, m..
      return _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), _mm512_shuffle_ps(f, f, 0x00),
                             _mm512_shuffle_ps(f, f, 0x55));
    }
  }

  static __m256 load8(const uint8_t* r, int64_t d, int64_t hd) {
    if constexpr (D == KvDtype::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(r) + d);
    } else if constexpr (D == KvDtype::kBF16) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * d));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else if constexpr (D == KvDtype::kI8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + d));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    } else if constexpr (D == KvDtype::kF8E4M3) {
      // Through f16 (F16C): code byte c in the high byte of a 16-bit lane, shifted right by one
      // arithmetically and bit 14 cleared, is the f16 with c's sign, exponent bits and mantissa
      // bits in place: c's value times 2^-8, subnormal codes as f16 subnormals, so exact for
      // every code (0x7f / 0xff come out +-480 * 2^-8 as in kv_e4m3_to_f32). 4 instructions
      // (the x 256 since moved into row_scale), 11 for the normal / subnormal blend it
      // replaced: fp8 attention 1.21-1.24x (Zen 3, 1 thread,
      // bench_attention --isa avx2 --formats-only --cold, 16 alternating runs, CPU time).
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + d));
      const __m128i h = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(_mm_setzero_si128(), b), 1),
                                      _mm_set1_epi16(static_cast<int16_t>(0xbfff)));
      return _mm256_cvtph_ps(h);  // c * 2^-8 (row_scale carries the 2^8)
    } else {
      // Element j of the 8 is nibble j of the little-endian 32-bit word: one broadcast, a
      // variable shift and a mask; the (scale, min) f16 pair converted by one vcvtph2ps. Against
      // byte unpacking and two scalar conversions: int4 attention 1.30-1.37x (Zen 3, 1 thread,
      // bench_attention --isa avx2 --formats-only --cold, 16 alternating runs).
      uint32_t w, sm;
      std::memcpy(&w, r + d / 2, 4);
      std::memcpy(&sm, i4_params(r, d, hd), 4);
      const __m256i u = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)),
                            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
          _mm256_set1_epi32(0xf));
      const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(sm)));  // scale, min
      return _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), _mm256_broadcastss_ps(f),
                             _mm256_broadcastss_ps(_mm_movehdup_ps(f)));
    }
  }
};

// t[h][j] = the lane-wise products of query head h (q + h hd) and key j (rows[j]), summed over
// the head dimension, for h < kG and j < nj: one K vector is dequantized once for kG heads.
template <class S, KvDtype D, int kHd, int kG, class PF>
inline void score_tile(const float* q, int64_t hd_rt, const uint8_t* const* rows, int nj,
                       PF* pf, typename S::V (*t)[S::kWidth]) {
  using V = typename S::V;
  using L = KvLoad<S, D>;
  constexpr int kW = S::kWidth;
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  for (int j = 0; j < nj; ++j) {
    const uint8_t* r = rows[j];
    if (pf != nullptr) pf->step();
    V acc[kG];
#pragma GCC unroll 8
    for (int h = 0; h < kG; ++h) acc[h] = S::zero();
    int64_t d = 0;
    for (; d + kW <= hd; d += kW) {
      const V kv = L::load(r, d, hd);
#pragma GCC unroll 8
      for (int h = 0; h < kG; ++h) acc[h] = S::fma(S::load(q + h * hd + d), kv, acc[h]);
    }
    if (d < hd) {
      const int n = static_cast<int>(hd - d);
      const V kv = L::tail(r, d, hd);
#pragma GCC unroll 8
      for (int h = 0; h < kG; ++h) acc[h] = S::fma(S::load_n(q + h * hd + d, n), kv, acc[h]);
    }
#pragma GCC unroll 8
    for (int h = 0; h < kG; ++h) t[h][j] = acc[h];
  }
  for (int j = nj; j < kW; ++j) {
    for (int h = 0; h < kG; ++h) t[h][j] = S::zero();
  }
}

// sc[g kKeyBlock + j] = q_g . k_j for every head g < group and key j < nb, k_j the dequantized
// record rows[j] (times its row scale rs[j] for kI8 / kF8E4M3). kWidth keys at a time: each
// (head, key) sums in its own vector and one transpose_sum per head gives kWidth scores.
template <class S, KvDtype D, int kHd, class PF>
inline void group_scores_q(const float* q, int64_t group, const uint8_t* const* rows,
                           const float* rs, int64_t nb, PF& pf, int64_t hd,
                           float* sc) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  // Accumulators + a K vector within the registers. 8 on AVX2 (16 registers) measured
  // 0.86-1.0x the speed of 4 (Zen 3, bench_attention --isa avx2 --formats-only --cold).
  constexpr int kGMax = kW == 16 ? 8 : 4;
  constexpr int64_t kB = detail::kKeyBlock;
  V t[kGMax][kW];
  for (int64_t j0 = 0; j0 < nb; j0 += kW) {
    const int nj = nb - j0 < kW ? static_cast<int>(nb - j0) : kW;
    for (int64_t g = 0; g < group;) {
      const int64_t left = group - g;
      const float* qg = q + g * hd;
      int ng = 1;
      if (left >= kGMax) {
        score_tile<S, D, kHd, kGMax>(qg, hd, rows + j0, nj, g == 0 ? &pf : nullptr, t);
        ng = kGMax;
      } else if (left >= 4) {
        score_tile<S, D, kHd, 4>(qg, hd, rows + j0, nj, g == 0 ? &pf : nullptr, t);
        ng = 4;
      } else if (left >= 2) {
        score_tile<S, D, kHd, 2>(qg, hd, rows + j0, nj, g == 0 ? &pf : nullptr, t);
        ng = 2;
      } else {
        score_tile<S, D, kHd, 1>(qg, hd, rows + j0, nj, g == 0 ? &pf : nullptr, t);
      }
      for (int h = 0; h < ng; ++h) {
        V s = S::transpose_sum(t[h]);
        if constexpr (KvLoad<S, D>::kRowScale) s = S::mul(s, S::load_n(rs + j0, nj));
        S::store_n(sc + (g + h) * kB + j0, s, nj);
      }
      g += ng;
    }
  }
}

// For kH heads at once: acc_h[0, hd) += sum_j p_h[j] v_j, with acc_h = acc + h hd,
// p_h = p + h kKeyBlock and v_j the dequantized record rows[j], j < nb. The head dimension is
// taken kU vectors at a time; a V vector is dequantized once for the kH heads, and the kH * kU
// accumulators stay in registers for the block. kH = 8, kU = 2 (AVX-512, a group of 8) reads
// each V vector once for the whole group: 1.1-1.3x the speed of two passes of kH = 4, kU = 4.
// AVX2 (16 registers) takes kH = 4, kU = 2: against pairs of heads (kH = 2, kU = 4) it decodes
// a V vector half as often, measured (Zen 3, bench_attention --isa avx2 --formats-only --cold,
// 12 alternating runs) int4 1.14-1.26x, fp8 1.08-1.13x, bf16 1.05-1.13x, int8 1.01-1.06x;
// kH = 8, kU = 1 gave int4 1.1-1.3x but bf16 0.8-1.0x.
// The weight of head h and key j is p[h * kPH + j * kPJ] (attention_lanes_avx2.h: heads in
// the lanes of each key's vector).
template <class S, KvDtype D, int kH, int kU, int kHd, int64_t kPH = detail::kKeyBlock,
          int64_t kPJ = 1, class PF>
inline void accumulate_v_q(float* acc, int64_t hd_rt, const float* p, const uint8_t* const* rows,
                           int64_t nb, PF* pf) {
  using V = typename S::V;
  using L = KvLoad<S, D>;
  constexpr int kW = S::kWidth;
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  int64_t d = 0;
  for (; d + kU * kW <= hd; d += kU * kW) {
    V a[kH][kU];
#pragma GCC unroll 8
    for (int h = 0; h < kH; ++h) {
#pragma GCC unroll 4
      for (int u = 0; u < kU; ++u) a[h][u] = S::load(acc + h * hd + d + u * kW);
    }
    for (int64_t j = 0; j < nb; ++j) {
      const uint8_t* r = rows[j];
      if (d == 0 && pf != nullptr) pf->step();
      V vv[kU];
#pragma GCC unroll 4
      for (int u = 0; u < kU; ++u) vv[u] = L::load(r, d + u * kW, hd);
#pragma GCC unroll 8
      for (int h = 0; h < kH; ++h) {
        const V ph = S::set1(p[h * kPH + j * kPJ]);
#pragma GCC unroll 4
        for (int u = 0; u < kU; ++u) a[h][u] = S::fma(ph, vv[u], a[h][u]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < kH; ++h) {
#pragma GCC unroll 4
      for (int u = 0; u < kU; ++u) S::store(acc + h * hd + d + u * kW, a[h][u]);
    }
  }
  for (; d < hd; d += kW) {
    const int n = hd - d < kW ? static_cast<int>(hd - d) : kW;
    V a[kH];
#pragma GCC unroll 8
    for (int h = 0; h < kH; ++h) a[h] = S::load_n(acc + h * hd + d, n);
    for (int64_t j = 0; j < nb; ++j) {
      const V vv = n == kW ? L::load(rows[j], d, hd) : L::tail(rows[j], d, hd);
#pragma GCC unroll 8
      for (int h = 0; h < kH; ++h) a[h] = S::fma(S::set1(p[h * kPH + j * kPJ]), vv, a[h]);
    }
#pragma GCC unroll 8
    for (int h = 0; h < kH; ++h) S::store_n(acc + h * hd + d, a[h], n);
  }
}

// acc [group, hd] += the weighted V rows for every head of the group, in passes of as many
// heads as the accumulators fit the register file (16 ymm or 32 zmm); head h's weight of key j
// is p[h * kPH + j * kPJ]. The first pass steps pf (per key).
template <class S, KvDtype D, int kHd, int64_t kPH = detail::kKeyBlock, int64_t kPJ = 1,
          class PF>
inline void accumulate_v_heads(float* acc, int64_t hd, const float* p, int64_t group,
                               const uint8_t* const* vr, int64_t nb, PF& pf) {
  int64_t g = 0;
  if constexpr (S::kWidth == 16) {
    for (; g + 8 <= group; g += 8) {
      accumulate_v_q<S, D, 8, 2, kHd, kPH, kPJ>(acc + g * hd, hd, p + g * kPH, vr, nb,
                                                g == 0 ? &pf : nullptr);
    }
    for (; g + 4 <= group; g += 4) {
      accumulate_v_q<S, D, 4, 4, kHd, kPH, kPJ>(acc + g * hd, hd, p + g * kPH, vr, nb,
                                                g == 0 ? &pf : nullptr);
    }
  } else {
    for (; g + 4 <= group; g += 4) {
      accumulate_v_q<S, D, 4, 2, kHd, kPH, kPJ>(acc + g * hd, hd, p + g * kPH, vr, nb,
                                                g == 0 ? &pf : nullptr);
    }
  }
  for (; g + 2 <= group; g += 2) {
    accumulate_v_q<S, D, 2, 4, kHd, kPH, kPJ>(acc + g * hd, hd, p + g * kPH, vr, nb,
                                              g == 0 ? &pf : nullptr);
  }
  for (; g < group; ++g) {
    accumulate_v_q<S, D, 1, 4, kHd, kPH, kPJ>(acc + g * hd, hd, p + g * kPH, vr, nb,
                                              g == 0 ? &pf : nullptr);
  }
}

// Whether a KV head's records are also asked for into L1 just before they are read
// (SpreadPrefetch::start_near): for f32 records (256 B at head size 64), whose V loop is one FMA
// per 64 bytes and head and waits on L2 without it. bench_attention --cold, one core, TinyLlama
// heads, alternating runs on a Zen 5 core: f32 decode of 512 / 4096 keys 19.8-21.7 -> 24.4-26.2
// GB/s of cache bytes (1.2x; 2 threads 1.1-1.2x). The compressed formats, whose dequantizing
// loops leave L2 latency hidden, measured 0.9-1.05x with it (bf16, fp8, int8, int4).
template <KvDtype D>
constexpr bool kNearPrefetch = D == KvDtype::kF32;

// Rows longer than this (every KV head of a token: Llama-2-7B's 32 heads of 128 are 16 KB of
// f32) take kv_attention_tiles' order.
constexpr int64_t kTileOrderRowBytes = 4096;

// Where kv_attention_tiles may run: the per-key-vector scores (group_scores_q) of the AVX2
// level. The keys-in-lanes scores of AVX-512 keep the head-major order: tile order there (16-key
// tiles through group_scores_kt, and the same for attention_int_avx512_vnni.cc's loop) was
// measured on an Emerald Rapids VM (2 MB L2 per core), bench_attention --formats-only --shape
// llama2-7b, 10-12 alternating rounds, paired medians of tile / head-major time at 1 / 2 threads:
// f32 4096 keys 1.04 / 1.01, batched 64 x 256 1.04 / 1.02, 512 keys 0.94 / 0.85; bf16 0.89-0.96;
// fp8 0.93-1.02; int8 0.93-1.10; int4 0.90-1.08. Head-major already read f32 at 87-91 % of the
// probe there and bf16 / int8 at its speed, so it was not kept (not measured on AMD's 1 MB L2).
template <class S, KvDtype D, int kHd>
constexpr bool kTileOrder = S::kWidth == 8 && !kScoresKeysInLanes<S, D, kHd>;

// kv_attention_range in tile order, for long rows: per key block, the scores of a tile of kW
// keys for every KV head in turn, then the tile after it; the softmax per KV head; then the V
// rows the same way. The head-major loop below reads one KV head's records of all the block's
// rows (a stride of the row), then the next head's: over rows of 16 KB the hardware prefetchers
// lost track of that, and the L2 requests of the next block (1 MB of f32 K and V) did not fit
// beside the current one. Tile order reads 8 rows side by side from start to end, which the
// prefetchers follow. A pure read of a 4096-key Llama-2-7B cache in the two orders (one core,
// Zen 3): 20 / 10-14 GB/s. Measured, bench_attention --formats-only --shape llama2-7b, 4096 keys,
// paired rounds against the head-major loop (both with attention_impl.h's 1 KB requests):
// f32 12.4 -> 7.8 ms at one core (17 GB/s of cache bytes, ~85 % of the probe), bf16 0.59x. Rows of
// 4 KB and less (TinyLlama, Llama-3-8B, Qwen2.5-7B) keep the head-major loop, which also asks
// for each head's records into L1 (start_near); the synthetic read found tile order no faster
// there (2 KB rows: slower).
// qs, mx, sum: as kv_attention_range's; sc: [n_kv, group, kKeyBlock] scores.
template <class S, KvDtype D, int kHd>
void kv_attention_tiles(const detail::AttentionRange& a, const float* qs, float* mx, float* sum,
                        float* sc) {
  using L = KvLoad<S, D>;
  constexpr int64_t kB = detail::kKeyBlock, kT = S::kWidth;
  const int64_t hd = kHd > 0 ? kHd : a.head_dim;
  const int64_t group = a.group, n_kv = a.n_kv;
  const int64_t head_bytes = kv_head_bytes(D, hd);
  const uint8_t* kb[kB];  // the block's K / V rows (first KV head's record)
  const uint8_t* vb[kB];
  const uint8_t* kr[kT];  // one KV head's records of a tile
  const uint8_t* vr[kT];
  float ks[kT];  // their row scales (kI8, kF8E4M3)
  const uint8_t* next_rows[2 * kB];
  SpreadPrefetch<false> pf;
  for (int64_t j0 = a.first; j0 <= a.last; j0 += kB) {
    const int64_t nb = a.last - j0 + 1 < kB ? a.last - j0 + 1 : kB;
    key_block_rows(a, j0, nb, kb, vb);
    // step() runs per key of a head in the scores and in the first V pass.
    const int64_t nbn = next_block_rows(a, j0, next_rows);
    pf.start(next_rows, 2 * nbn, n_kv * head_bytes, 2 * n_kv * nb);
    for (int64_t j = 0; j < nb; j += kT) {
      const int64_t nt = nb - j < kT ? nb - j : kT;
      for (int64_t h = 0; h < n_kv; ++h) {
        for (int64_t i = 0; i < nt; ++i) {
          kr[i] = kb[j + i] + h * head_bytes;
          if constexpr (L::kRowScale) ks[i] = L::row_scale(kr[i], hd);
        }
        group_scores_q<S, D, kHd>(qs + h * group * hd, group, kr, ks, nt, pf, hd,
                                  sc + h * group * kB + j);
      }
    }
    for (int64_t h = 0; h < n_kv; ++h) {
      softmax_block<S>(sc + h * group * kB, group, nb, hd, mx + h * group, sum + h * group,
                       a.out + h * group * hd);
    }
    for (int64_t j = 0; j < nb; j += kT) {
      const int64_t nt = nb - j < kT ? nb - j : kT;
      for (int64_t h = 0; h < n_kv; ++h) {
        float* w = sc + h * group * kB + j;  // [group, kB] from key j
        for (int64_t i = 0; i < nt; ++i) {
          vr[i] = vb[j + i] + h * head_bytes;
          if constexpr (L::kRowScale) {
            // The sums already hold the plain weights; only the V accumulation takes the scale.
            const float f = L::row_scale(vr[i], hd);
            for (int64_t g = 0; g < group; ++g) w[g * kB + i] *= f;
          }
        }
        accumulate_v_heads<S, D, kHd>(a.out + h * group * hd, hd, w, group, vr, nt, pf);
      }
    }
    pf.drain();
  }
  finish_range<S>(a, mx, sum);
}

template <class S, KvDtype D, int kHd>
void kv_attention_range(const detail::AttentionRange& a) {
  using L = KvLoad<S, D>;
  const int64_t hd = kHd > 0 ? kHd : a.head_dim;
  const int64_t group = a.group;
  const int64_t n_kv = a.n_kv, heads = n_kv * group;
  const int64_t head_bytes = kv_head_bytes(D, hd);
  constexpr int64_t kB = detail::kKeyBlock;
  float* qs = a.scratch;        // [n_kv, group, hd] q * scale
  float* mx = qs + heads * hd;  // [n_kv, group] running maxima
  float* sum = mx + heads;      // [n_kv, group] running sums
  float* sc = sum + heads;      // [group, kB] scores, then weights (one KV head's;
                                // kv_attention_tiles: [n_kv, group, kB])
  float* qsum = sc + group * kB;  // (int4, keys in the lanes) [n_kv, group, hd / 32]
  const uint8_t* kb[kB];        // the block's K / V rows (first KV head's record)
  const uint8_t* vb[kB];
  const uint8_t* kr[kB];        // one KV head's records
  const uint8_t* vr[kB];
  float ks[kB], vs[kB];         // their row scales (kI8, kF8E4M3)
  const uint8_t* next_rows[2 * kB];  // the next block's K rows, then its V rows
  const uint8_t* knext[kB];          // the next KV head's K records (or the next block's first)
  SpreadPrefetch<kNearPrefetch<D>> pf;
  // q is copied (scaled) before out is zeroed, so out may even overlap q.
  for (int64_t i = 0; i < heads * hd; ++i) qs[i] = a.q[i] * a.scale;
  if constexpr (D == KvDtype::kI4 && kScoresKeysInLanes<S, D, kHd>) {
    for (int64_t i = 0; i < heads * (kHd / 32); ++i) {
      float t = 0.0f;
      for (int64_t d = 0; d < 32; ++d) t += qs[i * 32 + d];
      qsum[i] = t;
    }
  }
  start_range(a, hd, mx, sum);
  if constexpr (kTileOrder<S, D, kHd>) {
    if (n_kv > 1 && n_kv * head_bytes > kTileOrderRowBytes) {
      return kv_attention_tiles<S, D, kHd>(a, qs, mx, sum, sc);
    }
  }
  for (int64_t j0 = a.first; j0 <= a.last; j0 += kB) {
    const int64_t nb = a.last - j0 + 1 < kB ? a.last - j0 + 1 : kB;
    key_block_rows(a, j0, nb, kb, vb);
    // The next block's rows (every KV head of the range) are asked for while this block is
    // computed, spread over its loops: step() is called per 4 words of a 16-key tile in
    // group_scores_kt or per key in group_scores_q, and per key in the first V pass, of every KV
    // head.
    const int64_t nbn = next_block_rows(a, j0, next_rows);
    int64_t score_steps = nb;
    if constexpr (kScoresKeysInLanes<S, D, kHd>) {
      score_steps = (nb + 15) / 16 * kKtStepsPerTile<D, kHd>;
    }
    pf.start(next_rows, 2 * nbn, n_kv * head_bytes, n_kv * (score_steps + nb));
    for (int64_t h = 0; h < n_kv; ++h) {
      float* acc = a.out + h * group * hd;  // [group, hd]
      for (int64_t i = 0; i < nb; ++i) {
        kr[i] = kb[i] + h * head_bytes;
        vr[i] = vb[i] + h * head_bytes;
        if constexpr (L::kRowScale) {
          ks[i] = L::row_scale(kr[i], hd);
          vs[i] = L::row_scale(vr[i], hd);
        }
      }
      if constexpr (kNearPrefetch<D>) pf.start_near(vr, nb, head_bytes, score_steps);
      if constexpr (kScoresKeysInLanes<S, D, kHd>) {
        group_scores_kt<S, D, kHd>(qs + h * group * hd, qsum + h * group * (kHd / 32), group, kr,
                                   ks, nb, pf, sc);
      } else {
        group_scores_q<S, D, kHd>(qs + h * group * hd, group, kr, ks, nb, pf, hd, sc);
      }
      softmax_block<S>(sc, group, nb, hd, mx + h * group, sum + h * group, acc);
      if constexpr (L::kRowScale) {
        // The sums already hold the plain weights; only the V accumulation takes the V scales.
        for (int64_t g = 0; g < group; ++g) {
          for (int64_t i = 0; i < nb; ++i) sc[g * kB + i] *= vs[i];
        }
      }
      if constexpr (kNearPrefetch<D>) {
        pf.drain_near();
        if (h + 1 < n_kv) {
          for (int64_t i = 0; i < nb; ++i) knext[i] = kb[i] + (h + 1) * head_bytes;
          pf.start_near(knext, nb, head_bytes, nb);
        } else {
          pf.start_near(next_rows, nbn, head_bytes, nb);
        }
      }
      accumulate_v_heads<S, D, kHd>(acc, hd, sc, group, vr, nb, pf);
    }
    pf.drain();
  }
  finish_range<S>(a, mx, sum);
}

template <class S, KvDtype D>
void kv_attention_range_hd(const detail::AttentionRange& a) {
  switch (a.head_dim) {
    case 64:
      return kv_attention_range<S, D, 64>(a);
    case 128:
      return kv_attention_range<S, D, 128>(a);
    default:
      return kv_attention_range<S, D, 0>(a);
  }
}

// Every format: the f32 cache through attention_impl.h, the others through the readers above.
template <class S>
void attention_range_any(const detail::AttentionRange& a) {
  switch (a.dtype) {
    case KvDtype::kF32: return kv_attention_range_hd<S, KvDtype::kF32>(a);
    case KvDtype::kBF16: return kv_attention_range_hd<S, KvDtype::kBF16>(a);
    case KvDtype::kF8E4M3: return kv_attention_range_hd<S, KvDtype::kF8E4M3>(a);
    case KvDtype::kI8: return kv_attention_range_hd<S, KvDtype::kI8>(a);
    case KvDtype::kI4: return kv_attention_range_hd<S, KvDtype::kI4>(a);
  }
}

}  // namespace
}  // namespace sampan::cpu
