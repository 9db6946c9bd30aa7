// Attention scores with the keys in the lanes (AVX-512), for the loop of kv_quant_impl.h.
//
// The other way (group_scores_q there) sums each (query head, key) pair in its own vector along
// the head dimension and reduces 16 such vectors with a transpose_sum per head: for a group of 8
// heads that reduction is ~2.8 shuffle-heavy instructions per (head, key), beside the 4 FMAs.
// Here 16 keys' records are transposed once, as 32-bit words, for the whole group
// (gemm_detail::transpose16, 64 shuffles per 16 x 16 tile of words), so that element d of the 16
// keys becomes one vector; a head's 16 scores then sum in the lanes, one FMA per element with
// q[d] broadcast from memory, and every element is decoded once per 16 keys for the group.
// Measured (bench_attention, TinyLlama's group of 8 at head size 64, one AVX-512 core, decode
// of 512 keys held in cache), the whole attention loop against group_scores_q: fp8 1.15x, int8
// 1.13x, int4 1.2x; bf16 1.1x and f32 1.0x (whose scores alone ran 1.2x: an f32 record is 4x
// the words of an int8 one to transpose, and f32 has nothing to decode).
//
// Decoding a word of the transposed tile, per format (element i of a record; the kv_quant.h
// layout):
//   f32    word w = element w.
//   bf16   word w = elements 2w (low half) and 2w + 1 (high half): a shift and a mask.
//   int8   word w = elements 4w .. 4w + 3, byte b signed: shift left, arithmetic shift right.
//   fp8    word w = elements 4w .. 4w + 3; e4m3 byte c -> the f32 whose exponent and mantissa
//          fields are c's (c & 0x7f) << 20 with c's sign, times 2^112: c * 2^-8, exact for every
//          code, subnormal codes included (f32 subnormals before the product); 0x7f / 0xff come
//          out +-480 * 2^-8 as in kv_e4m3_to_f32. The 2^8 is in the row scale, as in KvLoad.
//   int4   word w < hd / 8 = elements 8w .. 8w + 7, nibble b; then one word per group of 32
//          elements holding its f16 (scale, min) pair, so that a group's scores are
//          scale * (q . u) + min * sum(q), the raw dot q . u summed in the lanes per group.
// The row scales of int8 / fp8 multiply the 16 scores once (as in group_scores_q).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "kernels/common/kv_format.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/gemm_internal.h"

namespace sampan::cpu {
namespace {

// Whether group_scores_kt computes the scores: AVX-512 and a head size fixed at compile time, a
// multiple of 32 (whole int4 groups; whole bf16 word pairs).
#if defined(__AVX512F__)
template <class S, KvDtype D, int kHd>
constexpr bool kScoresKeysInLanes = S::kWidth == 16 && kHd > 0 && kHd % 32 == 0;
#else
template <class S, KvDtype D, int kHd>
constexpr bool kScoresKeysInLanes = false;
#endif

// The 32-bit words of a record that hold its elements, and all words transposed (int4: its
// (scale, min) words follow the elements').
template <KvDtype D, int kHd>
constexpr int kKtCodeWords = D == KvDtype::kF32    ? kHd
                             : D == KvDtype::kBF16 ? kHd / 2
                             : D == KvDtype::kI4   ? kHd / 8
                                                   : kHd / 4;
template <KvDtype D, int kHd>
constexpr int kKtWords = kKtCodeWords<D, kHd> + (D == KvDtype::kI4 ? kHd / 32 : 0);
// SpreadPrefetch steps per 16-key tile: one per 16 words transposed, one per 4 code words of the
// first head pass.
template <KvDtype D, int kHd>
constexpr int kKtStepsPerTile = (kKtWords<D, kHd> + 15) / 16 + kKtCodeWords<D, kHd> / 4;

#if defined(__AVX512F__)
// kt[w * 16 + j] = 32-bit word w of record rows[j], for w < kWords and j < 16, 16 words at a
// time; a last partial tile reads only the record's words (masked loads). Steps pf per tile.
template <int kWords, class PF>
inline void transpose_records(const uint8_t* const* rows, PF* pf, float* kt) {
  __m512i r[16];
  int w0 = 0;
  for (; w0 + 16 <= kWords; w0 += 16) {
    if (pf != nullptr) pf->step();
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(rows[i] + 4 * w0);
    gemm_detail::transpose16(r);
#pragma GCC unroll 16
    for (int e = 0; e < 16; ++e) _mm512_store_si512(kt + (w0 + e) * 16, r[e]);
  }
  if constexpr (kWords % 16 != 0) {
    if (pf != nullptr) pf->step();
    constexpr int kTail = kWords % 16;
    constexpr __mmask16 kMask = static_cast<__mmask16>((1u << kTail) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_epi32(kMask, rows[i] + 4 * w0);
    gemm_detail::transpose16(r);
#pragma GCC unroll 16
    for (int e = 0; e < kTail; ++e) _mm512_store_si512(kt + (w0 + e) * 16, r[e]);
  }
}

// Element kE of word t of the transposed tile, for the 16 keys, as f32 (the formats' decoding
// above; fp8 without its 2^112, int4 without its scale and minimum).
template <KvDtype D, int kE>
inline __m512 kt_element(__m512i t) {
  if constexpr (D == KvDtype::kF32) {
    return _mm512_castsi512_ps(t);
  } else if constexpr (D == KvDtype::kBF16) {
    return _mm512_castsi512_ps(kE == 0 ? _mm512_slli_epi32(t, 16)
                                       : _mm512_and_si512(t, _mm512_set1_epi32(-65536)));
  } else if constexpr (D == KvDtype::kI8) {
    const __m512i x = kE == 3 ? t : _mm512_slli_epi32(t, 24 - 8 * kE);
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(x, 24));
  } else if constexpr (D == KvDtype::kF8E4M3) {
    const __m512i x = kE == 3 ? t : _mm512_slli_epi32(t, 24 - 8 * kE);  // c in bits 31..24
    const __m512i em = _mm512_and_si512(_mm512_srli_epi32(x, 4), _mm512_set1_epi32(0x07f00000));
    // (x & sign) | em
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(x, _mm512_set1_epi32(static_cast<int>(0x80000000u)), em, 0xea));
  } else {
    const __m512i x = kE == 0 ? t : _mm512_srli_epi32(t, 4 * kE);
    return _mm512_cvtepi32_ps(kE == 7 ? x : _mm512_and_si512(x, _mm512_set1_epi32(0xf)));
  }
}

// acc[h] += sum over the elements of code words [w, w + 4) of q_h[element] * element, for kG
// heads (q + h kHd); elements of even and odd words in acc0 / acc1 (2 kG FMA chains).
template <KvDtype D, int kHd, int kG>
inline void kt_words4(const float* q, const float* kt, int w, __m512* acc0, __m512* acc1) {
  constexpr int kPer = D == KvDtype::kF32 ? 1 : D == KvDtype::kBF16 ? 2 : D == KvDtype::kI4 ? 8 : 4;
#pragma GCC unroll 4
  for (int l = 0; l < 4; ++l) {
    const __m512i t = _mm512_load_si512(kt + (w + l) * 16);
    __m512* acc = l % 2 == 0 ? acc0 : acc1;
    const int e0 = (w + l) * kPer;
    [&]<int... kEs>(std::integer_sequence<int, kEs...>) {
      (
          [&] {
            __m512 x = kt_element<D, kEs>(t);
            if constexpr (D == KvDtype::kF8E4M3) x = _mm512_mul_ps(x, _mm512_set1_ps(0x1p112f));
#pragma GCC unroll 8
            for (int h = 0; h < kG; ++h) {
              acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * kHd + e0 + kEs]), x, acc[h]);
            }
          }(),
          ...);
    }(std::make_integer_sequence<int, kPer>{});
  }
}

// s[h] lanes j < 16 = q_h . k_j for kG heads (q + h kHd) from the transposed tile kt; qsum
// (int4 only): [kG, kHd / 32] the sums of q_h over each group. Steps pf per 4 code words.
template <KvDtype D, int kHd, int kG, class PF>
inline void score_tile_kt(const float* q, const float* qsum, const float* kt, PF* pf,
                          __m512* s) {
  constexpr int kCode = kKtCodeWords<D, kHd>;
  __m512 a0[kG], a1[kG];
#pragma GCC unroll 8
  for (int h = 0; h < kG; ++h) s[h] = a0[h] = a1[h] = _mm512_setzero_ps();
  for (int w = 0; w < kCode; w += 4) {
    if (pf != nullptr) pf->step();
    kt_words4<D, kHd, kG>(q, kt, w, a0, a1);
    if constexpr (D == KvDtype::kI4) {
      // Four code words are one group of 32 elements: its (scale, min) word follows the codes.
      const int grp = w / 4;
      const __m512i pw = _mm512_load_si512(kt + (kCode + grp) * 16);
      const __m512 scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(pw));
      const __m512 min = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(pw, 16)));
#pragma GCC unroll 8
      for (int h = 0; h < kG; ++h) {
        s[h] = _mm512_fmadd_ps(scale, _mm512_add_ps(a0[h], a1[h]), s[h]);
        s[h] = _mm512_fmadd_ps(min, _mm512_set1_ps(qsum[h * (kHd / 32) + grp]), s[h]);
        a0[h] = a1[h] = _mm512_setzero_ps();
      }
    }
  }
  if constexpr (D != KvDtype::kI4) {
#pragma GCC unroll 8
    for (int h = 0; h < kG; ++h) s[h] = _mm512_add_ps(a0[h], a1[h]);
  }
}

// sc[g kKeyBlock + j] = q_g . k_j for every head g < group and key j < nb, k_j the record
// rows[j] (times its row scale rs[j] for int8 / fp8); qsum (int4): [group, kHd / 32] the sums of
// q_g over each group of elements. 16 keys at a time, their records transposed once for the
// whole group, up to 8 heads per pass (their scores stay in registers). Lanes past nb repeat the
// tile's first key; their scores are not stored.
template <class S, KvDtype D, int kHd, class PF>
inline void group_scores_kt(const float* q, const float* qsum, int64_t group,
                            const uint8_t* const* rows, const float* rs, int64_t nb,
                            PF& pf, float* sc) {
  constexpr int64_t kB = detail::kKeyBlock;
  constexpr int kWords = kKtWords<D, kHd>;
  constexpr bool kRowScale = D == KvDtype::kI8 || D == KvDtype::kF8E4M3;
  alignas(64) float kt[(kWords + 15) / 16 * 16 * 16];
  const uint8_t* r[16];
  __m512 s[8];
  for (int64_t j0 = 0; j0 < nb; j0 += 16) {
    const int nj = nb - j0 < 16 ? static_cast<int>(nb - j0) : 16;
    for (int j = 0; j < 16; ++j) r[j] = rows[j0 + (j < nj ? j : 0)];
    transpose_records<kWords>(r, &pf, kt);
    for (int64_t g = 0; g < group;) {
      const int64_t left = group - g;
      const float* qg = q + g * kHd;
      const float* qs = qsum + g * (kHd / 32);
      PF* p = g == 0 ? &pf : nullptr;
      int ng = 1;
      if (left >= 8) {
        score_tile_kt<D, kHd, 8>(qg, qs, kt, p, s);
        ng = 8;
      } else if (left >= 4) {
        score_tile_kt<D, kHd, 4>(qg, qs, kt, p, s);
        ng = 4;
      } else if (left >= 2) {
        score_tile_kt<D, kHd, 2>(qg, qs, kt, p, s);
        ng = 2;
      } else {
        score_tile_kt<D, kHd, 1>(qg, qs, kt, p, s);
      }
      for (int h = 0; h < ng; ++h) {
        __m512 v = s[h];
        if constexpr (kRowScale) v = _mm512_mul_ps(v, S::load_n(rs + j0, nj));
        S::store_n(sc + (g + h) * kB + j0, v, nj);
      }
      g += ng;
    }
  }
}
#endif  // __AVX512F__

}  // namespace
}  // namespace sampan::cpu
