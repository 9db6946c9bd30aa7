// Decode attention over int4 / int8 KV caches in integers (AVX512-VNNI): the same range loop as
// kv_quant_impl.h (key blocks, online softmax, the next block prefetched into L2), with both
// products on integer dot instructions instead of dequantized f32 FMAs. Taken at head sizes 64
// and 128 unless GemmPrecision is kF32 (attention_int_takes); every other case, and a range whose
// q holds an inf or NaN, runs the f32 loop.
//
// Why: the f32 loop decodes every code to f32 and multiplies it once per query head, so an int4
// or int8 cache, a quarter / half the bytes of bf16, decoded no faster than bf16 (TinyLlama
// shape, 4096 keys, one Emerald Rapids core: 1.9-3.5 GB/s of cache bytes against bf16's 8.2 and a
// 14 GB/s probe), about 17 vector instructions per (query head, key) for int4.
//
// Scores (keys in the lanes, as attention_scores_kt.h: 16 keys' records transposed as 32-bit
// words, once for the group): q of each head is rounded to x16 = round(q / s_q), s_q =
// absmax(q) / 32639, split into two signed byte planes x16 = 256 xh + xl (as the int4 weight
// decode, gemm_quant.h), and vpdpbusd multiplies 4 codes per lane with 4 bytes of a plane,
// broadcast from the head's prepared q:
//  - int4: a word's low nibbles (elements 8w + 0, 2, 4, 6) and high nibbles (8w + 1, 3, 5, 7),
//    by one and / shift each, are unsigned bytes; per group of 32 the sum 256 Ih + Il is
//    scale * s_q * (q16 . u) and min * s_q * sum(x16) completes the score (|lane| <= 32 * 15 *
//    128 per plane, exact).
//  - int8: codes c + 128 as unsigned bytes (one xor); 256 Ih + Il - 128 sum(x16) = x16 . c
//    exactly (|.| < 2^30 for head size <= 128), times s_q and the row scale.
// 2 vpdpbusd per 8 elements and head for int4 (the f32 loop: 8 FMAs plus the decode).
//
// V (keys along the reduction): the block's weights p (<= 1 after the online softmax's shift)
// times the value scale of each key (int4: per group; int8: the row scale) are rounded to int16
// against the block's largest scale, w = round(p * scale * 32767 / smax), and vpdpwssd adds 2
// keys per lane: the records of keys 2i and 2i + 1 are interleaved byte by byte and widened to
// int16 pairs once per KV head and block (int4: one and / shift for each nibble), then each head
// takes one vpdpwssd per 16 elements and pair of keys, its pair of weights broadcast from
// memory; per block the int32 sums (|lane| <= 32 * 15 * 32767, int8 32 * 128 * 32767) are
// converted, times smax / 32767, into the f32 accumulators, plus (int4) sum p * min per group.
// The int4 accumulators hold each group's even elements, then its odd ones (the nibble order);
// they are put back in element order when the range ends.
//
// Error, per output of query head h at token t, against the same attention over the decoded
// cache in exact arithmetic (the test checks it: test_kv_quant.cc):
//  - a score s_j is off by at most delta_j = (s_q / 2 + 2^-22 absmax(q)) sum_d |k_jd| (q rounded
//    to a multiple of s_q; f32 for s_q, x / s_q), so the normalised weights by at most a factor
//    e^(2 max delta) and the output by max |v| (e^(2 max delta) - 1);
//  - a weight w_j = p_j scale_j is off by at most smax / 65534 (smax the largest value scale of
//    its block, over the group for int4), so an output by sum_j (smax_j / 65534) |u_jd| / L,
//    u_jd the code (int4: 0..15, int8: |c| <= 128) and L = sum_j p_j >= 1;
//  - plus f32 summation (1e-6 relative).
// With TinyLlama-like heads (|q . k| scaled to a few units) both terms are ~1e-5 of the output,
// far below the cache's own quantization (int4 ~1e-1, int8 ~1e-2, test_kv_quant.cc).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/attention_scores_kt.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu {
namespace {

constexpr int64_t kB = detail::kKeyBlock;
constexpr int kQMax = 32639;  // 256 * 127 + 127: a signed hi and lo byte

template <KvDtype D, int kHd>
struct IntLayout {
  static constexpr bool kI4 = D == KvDtype::kI4;
  static_assert(kI4 || D == KvDtype::kI8);
  static_assert(kHd == 64 || kHd == 128);
  // Value-scale groups per record (int4: its groups of 32; int8: the row).
  static constexpr int kGroups = kI4 ? kHd / 32 : 1;
  static constexpr int kCodeWords = kKtCodeWords<D, kHd>;
  static constexpr int kTWords = kKtWords<D, kHd>;  // int4: the (scale, min) words too
  // Per head, in the scratch's q region (kHd floats a head): the plane dwords broadcast by the
  // scores (int4: per word w, xh of the low nibbles' elements, xh of the high ones', then the
  // same of xl; int8: per word, xh then xl), then s_q, then per group the sum of x16 (int4, as
  // f32, exact) or 128 sum(x16) (int8, as int32 bits).
  static constexpr int kPlaneDwords = kI4 ? 4 * kCodeWords : 2 * kCodeWords;
  static constexpr int kScaleAt = kPlaneDwords;
  static constexpr int kSumAt = kPlaneDwords + 1;
  static_assert(kSumAt + kGroups <= kHd);
  // Code vectors (16 int16 pairs) per pair of keys: kHd / 16.
  static constexpr int kVecs = kHd / 16;
  // Heads per V pass: 16 accumulators.
  static constexpr int kPass = 16 / kVecs;
  // Heads whose weights are prepared together: 16 (head, group) pairs.
  static constexpr int kChunk = 16 / kGroups;
};

// The heads' q (times scale) as x16 planes in qp ([heads, kHd] floats); false if any is inf or
// NaN (the caller then runs the f32 loop, which gives what such a q gives).
template <KvDtype D, int kHd>
bool prep_q(const float* q, float scale, int64_t heads, float* qp) {
  using L = IntLayout<D, kHd>;
  alignas(64) float xs[kHd];
  alignas(64) int32_t x16[kHd];
  for (int64_t h = 0; h < heads; ++h) {
    const float* x = q + h * kHd;
    for (int d = 0; d < kHd; d += 16) {
      _mm512_store_ps(xs + d, _mm512_mul_ps(_mm512_loadu_ps(x + d), _mm512_set1_ps(scale)));
    }
    // s_q = absmax / 32639; an absmax below 2^-100 counts as zero (its scores are below
    // 2^-100 sum |k|).
    float sq, inv;
    if (block_x_scale(xs, kHd, static_cast<float>(kQMax), &sq, &inv)) return false;
    const __m512i lim = _mm512_set1_epi32(kQMax);
    float* o = qp + h * kHd;
    for (int d = 0; d < kHd; d += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_load_ps(xs + d), _mm512_set1_ps(inv));
      __m512i r = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r = _mm512_max_epi32(_mm512_min_epi32(r, lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
      _mm512_store_si512(x16 + d, r);
    }
    auto* bytes = reinterpret_cast<int8_t*>(o);
    auto hi = [](int32_t v) { return static_cast<int8_t>((v + 128) >> 8); };
    auto lo = [](int32_t v) { return static_cast<int8_t>(v - 256 * ((v + 128) >> 8)); };
    if constexpr (L::kI4) {
      for (int w = 0; w < L::kCodeWords; ++w) {
        for (int b = 0; b < 4; ++b) {
          const int32_t e = x16[8 * w + 2 * b], od = x16[8 * w + 2 * b + 1];
          bytes[16 * w + b] = hi(e);
          bytes[16 * w + 4 + b] = hi(od);
          bytes[16 * w + 8 + b] = lo(e);
          bytes[16 * w + 12 + b] = lo(od);
        }
      }
      for (int g = 0; g < L::kGroups; ++g) {
        int32_t s = 0;
        for (int d = 0; d < 32; ++d) s += x16[32 * g + d];
        o[L::kSumAt + g] = static_cast<float>(s);  // |s| <= 32 * 32639 < 2^24: exact
      }
    } else {
      for (int w = 0; w < L::kCodeWords; ++w) {
        for (int b = 0; b < 4; ++b) {
          bytes[8 * w + b] = hi(x16[4 * w + b]);
          bytes[8 * w + 4 + b] = lo(x16[4 * w + b]);
        }
      }
      int32_t total = 0;
      for (int d = 0; d < kHd; ++d) total += x16[d];
      const int32_t c = 128 * total;  // |.| <= 128 * 128 * 32639 < 2^29
      std::memcpy(o + L::kSumAt, &c, 4);
    }
    o[L::kScaleAt] = sq;
  }
  return true;
}

// a += the products of u's unsigned bytes (vpdpbusd) or c's int16 pairs (vpdpwssd) with the
// dword at p broadcast. In asm: with the intrinsics, GCC 12 copied each accumulator to another
// register around every instruction and spilled some (the dword as a broadcast memory operand
// also saves the separate vpbroadcastd).
[[gnu::always_inline]] inline void dpbusd_b(__m512i& a, __m512i u, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(a) : "v"(u), "m"(*static_cast<const int32_t*>(p)));
}
[[gnu::always_inline]] inline void dpwssd_b(__m512i& a, __m512i c, const void* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(a) : "v"(c), "m"(*static_cast<const int32_t*>(p)));
}

// Dword i of a head's prepared q.
inline const void* qdw(const float* p, int i) { return p + i; }

// s[h] lanes = the 16 keys' scores (before int8's row scale) for kN heads (qp + h kHd), from the
// transposed tile kt. Steps pf once per 4 code words.
template <KvDtype D, int kHd, int kN, class PF>
[[gnu::noinline]] void int_score_tile(const float* qp, const float* kt, PF* pf, __m512* s) {
  using L = IntLayout<D, kHd>;
  if constexpr (L::kI4) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    __m512 acc[kN];
#pragma GCC unroll 8
    for (int h = 0; h < kN; ++h) acc[h] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int g = 0; g < L::kGroups; ++g) {
      if (pf != nullptr) pf->step();
      __m512i ah[kN], al[kN];
#pragma GCC unroll 8
      for (int h = 0; h < kN; ++h) ah[h] = al[h] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        const int w = 4 * g + l;
        const __m512i t = _mm512_load_si512(kt + w * 16);
        const __m512i ulo = _mm512_and_si512(t, nib);
        const __m512i uhi = _mm512_and_si512(_mm512_srli_epi32(t, 4), nib);
#pragma GCC unroll 8
        for (int h = 0; h < kN; ++h) {
          const float* p = qp + h * kHd;
          dpbusd_b(ah[h], ulo, qdw(p, 4 * w));
          dpbusd_b(ah[h], uhi, qdw(p, 4 * w + 1));
          dpbusd_b(al[h], ulo, qdw(p, 4 * w + 2));
          dpbusd_b(al[h], uhi, qdw(p, 4 * w + 3));
        }
      }
      const __m512i pw = _mm512_load_si512(kt + (L::kCodeWords + g) * 16);
      const __m512 scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(pw));
      const __m512 mn = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(pw, 16)));
#pragma GCC unroll 8
      for (int h = 0; h < kN; ++h) {
        const __m512 dot =
            _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(ah[h], 8), al[h]));
        acc[h] = _mm512_fmadd_ps(scale, dot, acc[h]);
        acc[h] = _mm512_fmadd_ps(mn, _mm512_set1_ps(qp[h * kHd + L::kSumAt + g]), acc[h]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < kN; ++h) {
      s[h] = _mm512_mul_ps(acc[h], _mm512_set1_ps(qp[h * kHd + L::kScaleAt]));
    }
  } else {
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i ah[kN], al[kN];
#pragma GCC unroll 8
    for (int h = 0; h < kN; ++h) ah[h] = al[h] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int w = 0; w < L::kCodeWords; ++w) {
      if (pf != nullptr && w % 4 == 0) pf->step();
      const __m512i u = _mm512_xor_si512(_mm512_load_si512(kt + w * 16), bias);
#pragma GCC unroll 8
      for (int h = 0; h < kN; ++h) {
        const float* p = qp + h * kHd;
        dpbusd_b(ah[h], u, qdw(p, 2 * w));
        dpbusd_b(al[h], u, qdw(p, 2 * w + 1));
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < kN; ++h) {
      int32_t c;
      std::memcpy(&c, qp + h * kHd + L::kSumAt, 4);
      const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(ah[h], 8), al[h]),
                                           _mm512_set1_epi32(c));
      s[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(qp[h * kHd + L::kScaleAt]));
    }
  }
}

// sc[g kB + j] = the scores of heads g < group (q planes qp + g kHd) and keys j < nb (records
// rows[j], int8 row scales rs[j]), 16 keys at a time, up to 8 heads per pass.
template <KvDtype D, int kHd, class PF>
void int_group_scores(const float* qp, int64_t group, const uint8_t* const* rows, const float* rs,
                      int64_t nb, PF& pf, float* sc) {
  using L = IntLayout<D, kHd>;
  alignas(64) float kt[(L::kTWords + 15) / 16 * 16 * 16];
  const uint8_t* r[16];
  __m512 s[8];
  for (int64_t j0 = 0; j0 < nb; j0 += 16) {
    const int nj = nb - j0 < 16 ? static_cast<int>(nb - j0) : 16;
    for (int j = 0; j < 16; ++j) r[j] = rows[j0 + (j < nj ? j : 0)];
    transpose_records<L::kTWords>(r, &pf, kt);
    for (int64_t g = 0; g < group;) {
      const int64_t left = group - g;
      const float* qg = qp + g * kHd;
      PF* p = g == 0 ? &pf : nullptr;
      int ng = 1;
      if (left >= 8) {
        int_score_tile<D, kHd, 8>(qg, kt, p, s);
        ng = 8;
      } else if (left >= 4) {
        int_score_tile<D, kHd, 4>(qg, kt, p, s);
        ng = 4;
      } else if (left >= 2) {
        int_score_tile<D, kHd, 2>(qg, kt, p, s);
        ng = 2;
      } else {
        int_score_tile<D, kHd, 1>(qg, kt, p, s);
      }
      for (int h = 0; h < ng; ++h) {
        __m512 v = s[h];
        if constexpr (!L::kI4) v = _mm512_mul_ps(v, Avx512::load_n(rs + j0, nj));
        Avx512::store_n(sc + (g + h) * kB + j0, v, nj);
      }
      g += ng;
    }
  }
}

// out[j] = the 32-bit word at rows[j] + offset for j < n (vpgatherqd, 8 rows at a time).
inline void gather_dwords(const uint8_t* const* rows, int64_t n, int64_t offset, uint32_t* out) {
  const __m512i off = _mm512_set1_epi64(offset);
  for (int64_t j = 0; j < n; j += 8) {
    const __mmask8 k = static_cast<__mmask8>(n - j < 8 ? (1u << (n - j)) - 1u : 0xffu);
    const __m512i idx = _mm512_add_epi64(_mm512_maskz_loadu_epi64(k, rows + j), off);
    const __m256i w = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), k, idx, nullptr, 1);
    _mm256_mask_storeu_epi32(out + j, k, w);
  }
}

// One KV head's V block as vpdpwssd operands: the records of keys 2i and 2i + 1 interleaved
// (code vector v of pair i: lane e = key 2i's and key 2i + 1's code of element e of the vector:
// int4 group v / 2, its even (v even) or odd elements; int8 elements 16 v + e), the value
// scales times 32767 / smax, and (int4) the minima.
template <KvDtype D, int kHd>
struct VBlock {
  using L = IntLayout<D, kHd>;
  alignas(64) int32_t codes[kB / 2][L::kVecs][16];
  alignas(64) float t[L::kGroups][kB];    // scale_j * 32767 / smax (0 past nb)
  alignas(64) float mn[L::kGroups][kB];   // int4: min_j (0 past nb)
  float mult[L::kGroups];                 // smax / 32767
  float bad[L::kGroups];                  // NaN where a scale or minimum is not finite, else 0
  int64_t pairs = 0;

  template <class PF>
  void load(const uint8_t* const* vr, int64_t nb, PF& pf) {
    pairs = (nb + 1) / 2;
    for (int64_t i = 0; i < pairs; ++i) {
      const uint8_t* a = vr[2 * i];
      const uint8_t* b = 2 * i + 1 < nb ? vr[2 * i + 1] : a;  // its weight is 0
      pf.step();
      if (2 * i + 1 < nb) pf.step();
#pragma GCC unroll 8
      for (int c = 0; c < kHd / 32 * (L::kI4 ? 1 : 2); ++c) {
        const __m128i xa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * c));
        const __m128i xb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * c));
        const __m256i y = _mm256_set_m128i(_mm_unpackhi_epi8(xa, xb), _mm_unpacklo_epi8(xa, xb));
        if constexpr (L::kI4) {
          const __m512i z = _mm512_cvtepu8_epi16(y);
          const __m512i m = _mm512_set1_epi16(0x000f);
          _mm512_store_si512(codes[i][2 * c], _mm512_and_si512(z, m));
          _mm512_store_si512(codes[i][2 * c + 1], _mm512_and_si512(_mm512_srli_epi16(z, 4), m));
        } else {
          _mm512_store_si512(codes[i][c], _mm512_cvtepi8_epi16(y));
        }
      }
    }
    for (int g = 0; g < L::kGroups; ++g) {
      for (int64_t j = nb; j < kB; ++j) t[g][j] = mn[g][j] = 0.0f;
    }
    if constexpr (L::kI4) {
      alignas(64) uint32_t words[L::kGroups][kB];
      for (int g = 0; g < L::kGroups; ++g) gather_dwords(vr, nb, kHd / 2 + 4 * g, words[g]);
      for (int g = 0; g < L::kGroups; ++g) {
        for (int64_t j = 0; j < nb; j += 16) {
          const __mmask16 k = Avx512::lane_mask(nb - j < 16 ? static_cast<int>(nb - j) : 16);
          const __m512i w = _mm512_maskz_loadu_epi32(k, &words[g][j]);
          _mm512_mask_storeu_ps(&t[g][j], k, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w)));
          _mm512_mask_storeu_ps(&mn[g][j], k,
                                _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w, 16))));
        }
      }
    } else {
      gather_dwords(vr, nb, kHd, reinterpret_cast<uint32_t*>(t[0]));
    }
    for (int g = 0; g < L::kGroups; ++g) {
      __m512 mx = _mm512_setzero_ps();
      __mmask16 nonfinite = 0;
      for (int64_t j = 0; j < kB; j += 16) {
        const __m512 s = _mm512_load_ps(&t[g][j]);
        nonfinite |= _mm512_fpclass_ps_mask(s, 0x99);
        if constexpr (L::kI4) nonfinite |= _mm512_fpclass_ps_mask(_mm512_load_ps(&mn[g][j]), 0x99);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(s));
      }
      const float smax = _mm512_reduce_max_ps(mx);
      bad[g] = nonfinite != 0 ? NAN : 0.0f;
      // A largest scale of 0 (constant groups) or below 2^-100 leaves the codes' term out: at
      // most 15 * 2^-100 per element (int8: 128 * 2^-100).
      const bool use = nonfinite == 0 && smax >= 0x1p-100f;
      mult[g] = use ? smax / 32767.0f : 0.0f;
      const float inv = use ? 32767.0f / smax : 0.0f;
      for (int64_t j = 0; j < kB; j += 16) {
        _mm512_store_ps(&t[g][j], _mm512_mul_ps(_mm512_load_ps(&t[g][j]), _mm512_set1_ps(inv)));
      }
    }
  }
};

// For heads h < kN (weights w16 + h * kGroups * kB int16, accumulators out + h kHd): out +=
// the block's weighted codes, times mult, plus add[h][g] per group.
// Out of line, as int_score_tile: inlined into the range loop, the accumulators share the
// register file with the loop's state and GCC spills them (objdump: hundreds of zmm stores to
// the stack in int_attention_range, none in these functions).
template <KvDtype D, int kHd, int kN>
[[gnu::noinline]] void int_accumulate_v(const VBlock<D, kHd>& vb, const int16_t* w16,
                                        const float* add, float* out) {
  using L = IntLayout<D, kHd>;
  __m512i acc[kN][L::kVecs];
#pragma GCC unroll 8
  for (int h = 0; h < kN; ++h) {
#pragma GCC unroll 8
    for (int v = 0; v < L::kVecs; ++v) acc[h][v] = _mm512_setzero_si512();
  }
  for (int64_t i = 0; i < vb.pairs; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < L::kVecs; ++v) {
      const __m512i c = _mm512_load_si512(vb.codes[i][v]);
      const int g = L::kI4 ? v / 2 : 0;
#pragma GCC unroll 8
      for (int h = 0; h < kN; ++h) {
        dpwssd_b(acc[h][v], c, w16 + (h * L::kGroups + g) * kB + 2 * i);
      }
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < kN; ++h) {
#pragma GCC unroll 8
    for (int v = 0; v < L::kVecs; ++v) {
      const int g = L::kI4 ? v / 2 : 0;
      float* o = out + h * kHd + 16 * v;
      const __m512 base =
          _mm512_add_ps(_mm512_loadu_ps(o), _mm512_set1_ps(add[h * L::kGroups + g]));
      _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][v]),
                                          _mm512_set1_ps(vb.mult[g]), base));
    }
  }
}

// int_accumulate_v for n <= kN heads.
template <KvDtype D, int kHd, int kN>
inline void int_accumulate_pass(int n, const VBlock<D, kHd>& vb, const int16_t* w16,
                                const float* add, float* out) {
  if (n == kN) return int_accumulate_v<D, kHd, kN>(vb, w16, add, out);
  if constexpr (kN > 1) int_accumulate_pass<D, kHd, kN - 1>(n, vb, w16, add, out);
}

template <KvDtype D, int kHd>
void int_attention_range(const detail::AttentionRange& a) {
  using L = IntLayout<D, kHd>;
  const int64_t group = a.group;
  const int64_t n_kv = a.n_kv, heads = n_kv * group;
  const int64_t head_bytes = kv_head_bytes(D, kHd);
  float* qp = a.scratch;         // [heads, kHd]: the prepared q (IntLayout)
  float* mx = qp + heads * kHd;  // [n_kv, group] running maxima
  float* sum = mx + heads;       // [n_kv, group] running sums
  float* sc = sum + heads;       // [group, kB] scores, then weights (one KV head's)
  // Read before out is written (out may overlap q).
  if (!prep_q<D, kHd>(a.q, a.scale, heads, qp)) return detail::attention_range_avx512(a);
  start_range(a, kHd, mx, sum);
  const uint8_t* kb[kB];
  const uint8_t* vb[kB];
  const uint8_t* kr[kB];
  const uint8_t* vr[kB];
  alignas(64) float ks[kB];
  const uint8_t* next_rows[2 * kB];
  VBlock<D, kHd> vblock;
  alignas(64) int16_t w16[L::kChunk * L::kGroups * kB];
  float add[L::kChunk * L::kGroups];
  SpreadPrefetch<false> pf;
  for (int64_t j0 = a.first; j0 <= a.last; j0 += kB) {
    const int64_t nb = a.last - j0 + 1 < kB ? a.last - j0 + 1 : kB;
    key_block_rows(a, j0, nb, kb, vb);
    const int64_t nbn = next_block_rows(a, j0, next_rows);
    const int64_t score_steps = (nb + 15) / 16 * kKtStepsPerTile<D, kHd>;
    pf.start(next_rows, 2 * nbn, n_kv * head_bytes, n_kv * (score_steps + nb));
    const __mmask16 lo_mask = Avx512::lane_mask(nb < 16 ? static_cast<int>(nb) : 16);
    const __mmask16 hi_mask = Avx512::lane_mask(nb > 16 ? static_cast<int>(nb - 16) : 0);
    for (int64_t h = 0; h < n_kv; ++h) {
      float* acc = a.out + h * group * kHd;  // [group, kHd]
      for (int64_t i = 0; i < nb; ++i) {
        kr[i] = kb[i] + h * head_bytes;
        vr[i] = vb[i] + h * head_bytes;
      }
      if constexpr (!L::kI4) gather_dwords(kr, nb, kHd, reinterpret_cast<uint32_t*>(ks));
      int_group_scores<D, kHd>(qp + h * group * kHd, group, kr, ks, nb, pf, sc);
      softmax_block<Avx512>(sc, group, nb, kHd, mx + h * group, sum + h * group, acc);
      vblock.load(vr, nb, pf);
      // Heads in chunks whose (head, group) minimum terms fill one transpose_sum, then in
      // passes of kPass over the chunk's weights.
      for (int64_t c0 = 0; c0 < group; c0 += L::kChunk) {
        const int nc = group - c0 < L::kChunk ? static_cast<int>(group - c0) : L::kChunk;
        // (int4) sum_j p_j min_j per head and group: the vectors of products, then one
        // transpose_sum for all of them (lane hh kGroups + g).
        __m512 mv[16];
        if constexpr (L::kI4) {
          for (int i = 0; i < 16; ++i) mv[i] = _mm512_setzero_ps();
        }
        float nan[L::kChunk];
        const __m512i lim = _mm512_set1_epi32(32767);
        for (int hh = 0; hh < nc; ++hh) {
          const float* p = sc + (c0 + hh) * kB;
          const __m512 p0 = _mm512_maskz_loadu_ps(lo_mask, p);
          const __m512 p1 = _mm512_maskz_loadu_ps(hi_mask, p + 16);
          // A NaN weight (from a NaN score) makes the head's outputs NaN, as in the f32 loop.
          nan[hh] = (_mm512_fpclass_ps_mask(p0, 0x99) | _mm512_fpclass_ps_mask(p1, 0x99)) ? NAN
                                                                                          : 0.0f;
          for (int g = 0; g < L::kGroups; ++g) {
            int16_t* w = w16 + (hh * L::kGroups + g) * kB;
            const __m512 q0 = _mm512_mul_ps(p0, _mm512_load_ps(&vblock.t[g][0]));
            const __m512 q1 = _mm512_mul_ps(p1, _mm512_load_ps(&vblock.t[g][16]));
            const __m512i r0 = _mm512_min_epi32(_mm512_cvtps_epi32(q0), lim);
            const __m512i r1 = _mm512_min_epi32(_mm512_cvtps_epi32(q1), lim);
            _mm256_store_si256(reinterpret_cast<__m256i*>(w), _mm512_cvtepi32_epi16(r0));
            _mm256_store_si256(reinterpret_cast<__m256i*>(w + 16), _mm512_cvtepi32_epi16(r1));
            if constexpr (L::kI4) {
              mv[hh * L::kGroups + g] =
                  _mm512_fmadd_ps(p0, _mm512_load_ps(&vblock.mn[g][0]),
                                  _mm512_mul_ps(p1, _mm512_load_ps(&vblock.mn[g][16])));
            }
          }
        }
        alignas(64) float msum[16] = {};
        if constexpr (L::kI4) _mm512_store_ps(msum, Avx512::transpose_sum(mv));
        for (int hh = 0; hh < nc; ++hh) {
          for (int g = 0; g < L::kGroups; ++g) {
            add[hh * L::kGroups + g] = msum[hh * L::kGroups + g] + nan[hh] + vblock.bad[g];
          }
        }
        for (int g0 = 0; g0 < nc; g0 += L::kPass) {
          const int n = nc - g0 < L::kPass ? nc - g0 : L::kPass;
          int_accumulate_pass<D, kHd, L::kPass>(n, vblock, w16 + g0 * L::kGroups * kB,
                                                add + g0 * L::kGroups, acc + (c0 + g0) * kHd);
        }
      }
    }
    pf.drain();
  }
  if constexpr (L::kI4) {
    // Each group's even elements, then its odd ones -> element order.
    const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15,
                                         31);
    for (int64_t h = 0; h < heads; ++h) {
      for (int g = 0; g < L::kGroups; ++g) {
        float* o = a.out + h * kHd + 32 * g;
        const __m512 ev = _mm512_loadu_ps(o), od = _mm512_loadu_ps(o + 16);
        _mm512_storeu_ps(o, _mm512_permutex2var_ps(ev, i0, od));
        _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(ev, i1, od));
      }
    }
  }
  finish_range<Avx512>(a, mx, sum);
}

}  // namespace

namespace detail {

bool attention_int_takes(KvDtype dtype, int64_t head_dim) {
  return (dtype == KvDtype::kI4 || dtype == KvDtype::kI8) && (head_dim == 64 || head_dim == 128);
}

void attention_range_int_avx512_vnni(const AttentionRange& a) {
  const bool hd64 = a.head_dim == 64, hd128 = a.head_dim == 128;
  if (a.dtype == KvDtype::kI4 && hd64) return int_attention_range<KvDtype::kI4, 64>(a);
  if (a.dtype == KvDtype::kI4 && hd128) return int_attention_range<KvDtype::kI4, 128>(a);
  if (a.dtype == KvDtype::kI8 && hd64) return int_attention_range<KvDtype::kI8, 64>(a);
  if (a.dtype == KvDtype::kI8 && hd128) return int_attention_range<KvDtype::kI8, 128>(a);
  attention_range_avx512(a);
}

}  // namespace detail
}  // namespace sampan::cpu
