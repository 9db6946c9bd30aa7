// Decode attention over int4 / int8 KV caches in integers on 8-lane vectors (AVX2, and VEX
// vpdpwssd where the CPU has AVX-VNNI): the AVX2 counterpart of attention_int_avx512_vnni.cc,
// for CPUs without AVX-512 (AMD Zen 2 / Zen 3, Intel Alder Lake / Sierra Forest). The same range
// loop (key blocks of 32, online softmax, the next block asked for into L2), both products on
// int16 pair products instead of dequantized f32 FMAs. Taken at head sizes 64 and 128 unless
// GemmPrecision is kF32 (attention_int_takes); other cases, and a range whose q holds an inf or
// NaN, run the f32 loop (kv_quant_impl.h).
//
// Why: the f32 loop at the AVX2 level decodes every code to f32 and, with 16 registers, decodes
// each K and V vector again for every 4 query heads; an int4 cache (a quarter of bf16's bytes)
// decoded slower than bf16 (TinyLlama shape, 4096 keys, one core: 0.98 against 0.81 ms).
//
// Scores (keys in the lanes): 8 keys' records are transposed as 32-bit words (8 x 8 word
// transposes), so that a word of the tile holds the same elements of 8 keys. q of each head is
// rounded to x16 = round(q / s_q), s_q = absmax(q) / 32639 (the bound of the AVX-512 loop, so
// one contract covers both), kept as int16 pairs in the order the codes unpack:
//  - int4: word w holds elements 8w .. 8w + 7, nibble n element 8w + n; (t >> 4b) & 0x000f000f
//    is an int16 pair of elements (8w + b, 8w + 4 + b), one shift and one and for b = 0..3;
//  - int8: word w holds elements 4w .. 4w + 3 as signed bytes; shifts give the int16 pairs
//    (4w, 4w + 2) and (4w + 1, 4w + 3).
// Each head multiplies a pair vector by its q pair (a dword broadcast from the prepared q) with
// vpdpwssd, or vpmaddwd and vpaddd without AVX-VNNI: 16 products per instruction (8 per
// instruction pair), against one FMA of 8 products plus the f32 loop's decoding. int4 per group
// of 32: scale * s_q * (x16 . u) + min * s_q * sum(x16) (|lane| <= 32 * 15 * 32639 < 2^24, exact);
// int8: s_q * row scale * (x16 . c) (|lane| <= 128 * 128 * 32639 < 2^29).
//
// V (keys along the reduction), as the AVX-512 loop: the block's weights p (<= 1 after the online
// softmax's shift) times the value scale of each key (int4 per group, int8 the row scale) are
// rounded to int16 against the block's largest scale; the records of keys 2i and 2i + 1 are
// interleaved byte by byte and widened to int16 pairs once per KV head and block (int4: one and /
// shift per nibble), and each head takes one vpdpwssd (vpmaddwd + vpaddd) per 8 elements and pair
// of keys; per block the int32 sums (|lane| <= 32 * 15 * 32767, int8 32 * 128 * 32767) times
// smax / 32767 go into the f32 accumulators, plus (int4) sum p * min per group. The int4
// accumulators of a group of 32 hold elements 0, 2, .., 14, then 1, 3, .., 15, then the same of
// 16 .. 31 (the nibble order); put back in element order when the range ends.
//
// Error: the bound stated in attention_int_avx512_vnni.cc, unchanged (the same roundings of q and
// of the weights; the sums are exact integers either way), checked per output by test_kv_quant.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu {
namespace {

constexpr int64_t kB = detail::kKeyBlock;
constexpr int kQMax = 32639;  // as attention_int_avx512_vnni.cc (its test bound)

// Rows longer than this (every KV head's records of a token) are read in tile order, as
// kv_attention_tiles (kv_quant_impl.h) reads rows over kTileOrderRowBytes: per key block, the
// scores of 8 keys for every KV head in turn, then the next 8 keys; the softmax per KV head; the
// value scales and then the V codes the same way, each head's V sums kept in int32 until the
// block ends (the same integers as the head-major order, the same f32 operations after them).
// The head-major order reads one KV head's records of the block's 32 rows (a stride of the row),
// then the next head's: over Llama-2-7B's 4.2 KB int8 rows its first read of each K record (the
// row scale) took 11 % of the time (perf). Measured, bench_attention --formats-only --shape
// llama2-7b (32 KV heads of 128), 4-6 paired rounds against the head-major loop, 3 runs, 1 / 2
// threads: int8 (4.2 KB rows) decode of 4096 keys 0.71-0.77 / 0.70-0.80 of the time, batched 64
// x 256 0.70-0.75 / 0.69-0.87; int4 (2.3 KB rows) 0.86-0.95 / 0.80-0.89 and 0.68-0.81 /
// 0.71-0.83 (then group_words below: 0.76-0.91 more). Rows of 2 KB and less (TinyLlama, Llama-3-8B,
// Qwen2.5-7B) keep the head-major order. At --shape qwen1.5-1.8b (16 KV heads of 128, 6 paired
// rounds, 1 / 2 threads), head-major against tile order: int8's 2.1 KB rows 1.33 / 1.08x the
// time at 4096 keys, 1.38 / 1.41x batched (so 2 KB, not 4); int4's 1.15 KB rows in tile order
// 1.40 / 1.06x the head-major time at 4096 keys, 0.92 / 0.84x batched (so not below 2 KB).
constexpr int64_t kIntTileRowBytes = 2048;

template <KvDtype D, int kHd>
struct Layout8 {
  static constexpr bool kI4 = D == KvDtype::kI4;
  static_assert(kI4 || D == KvDtype::kI8);
  static_assert(kHd == 64 || kHd == 128);
  static constexpr int kGroups = kI4 ? kHd / 32 : 1;  // value-scale groups per record
  static constexpr int kCodeWords = kI4 ? kHd / 8 : kHd / 4;
  static constexpr int kTWords = kCodeWords + (kI4 ? kGroups : 0);  // int4: (scale, min) words
  // Per head, in the scratch's q region (kHd floats a head): kHd / 2 dwords of x16 pairs (int4:
  // 4 per word, pair b = (8w + b, 8w + 4 + b); int8: 2 per word), then s_q, then (int4) per
  // group the sum of x16 as f32 (exact).
  static constexpr int kScaleAt = kHd / 2;
  static constexpr int kSumAt = kScaleAt + 1;
  static_assert(kSumAt + kGroups <= kHd);
  static constexpr int kVecs = kHd / 8;  // int16-pair vectors per pair of keys
  static constexpr int kChunk = 16 / kGroups;  // heads whose weights are prepared together
};

// The heads' q (times scale) as x16 pairs in qp ([heads, kHd] floats); false if any is inf or
// NaN (the caller then runs the f32 loop, which gives what such a q gives).
template <KvDtype D, int kHd>
bool prep_q8(const float* q, float scale, int64_t heads, float* qp) {
  using L = Layout8<D, kHd>;
  alignas(32) float xs[kHd];
  alignas(32) int32_t x16[kHd];
  for (int64_t h = 0; h < heads; ++h) {
    const float* x = q + h * kHd;
    for (int d = 0; d < kHd; d += 8) {
      _mm256_store_ps(xs + d, _mm256_mul_ps(_mm256_loadu_ps(x + d), _mm256_set1_ps(scale)));
    }
    const AbsMax am = absmax_avx2(xs, kHd);
    if (!am.finite) return false;
    // An absmax below 2^-100 counts as zero (its scores are below 2^-100 sum |k|).
    const bool zero = am.value < 0x1p-100f;
    const float sq = zero ? 0.0f : am.value / static_cast<float>(kQMax);
    const float inv = zero ? 0.0f : static_cast<float>(kQMax) / am.value;
    const __m256i lim = _mm256_set1_epi32(kQMax);
    for (int d = 0; d < kHd; d += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_load_ps(xs + d), _mm256_set1_ps(inv));
      __m256i r = _mm256_cvtps_epi32(v);  // to nearest (the default rounding)
      r = _mm256_max_epi32(_mm256_min_epi32(r, lim), _mm256_sub_epi32(_mm256_setzero_si256(), lim));
      _mm256_store_si256(reinterpret_cast<__m256i*>(x16 + d), r);
    }
    float* o = qp + h * kHd;
    auto* pairs = reinterpret_cast<int16_t*>(o);
    if constexpr (L::kI4) {
      for (int w = 0; w < L::kCodeWords; ++w) {
        for (int b = 0; b < 4; ++b) {
          pairs[2 * (4 * w + b)] = static_cast<int16_t>(x16[8 * w + b]);
          pairs[2 * (4 * w + b) + 1] = static_cast<int16_t>(x16[8 * w + 4 + b]);
        }
      }
      for (int g = 0; g < L::kGroups; ++g) {
        int32_t s = 0;
        for (int d = 0; d < 32; ++d) s += x16[32 * g + d];
        o[L::kSumAt + g] = static_cast<float>(s);  // |s| <= 32 * 32639 < 2^24: exact
      }
    } else {
      for (int w = 0; w < L::kCodeWords; ++w) {
        pairs[4 * w] = static_cast<int16_t>(x16[4 * w]);
        pairs[4 * w + 1] = static_cast<int16_t>(x16[4 * w + 2]);
        pairs[4 * w + 2] = static_cast<int16_t>(x16[4 * w + 1]);
        pairs[4 * w + 3] = static_cast<int16_t>(x16[4 * w + 3]);
      }
    }
    o[L::kScaleAt] = sq;
  }
  return true;
}

inline __m256i bcast_dword(const float* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// kt[w * 8 + j] = 32-bit word w of record rows[j] for w < kWords, j < 8; a last partial chunk
// (int4's 2 or 4 (scale, min) words) reads only the record's words. Steps pf per chunk.
template <int kWords, class PF>
inline void transpose_records8(const uint8_t* const* rows, PF* pf, int32_t* kt) {
  __m256i r[8];
  int w0 = 0;
  for (; w0 + 8 <= kWords; w0 += 8) {
    if (pf != nullptr) pf->step();
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + 4 * w0));
    }
    transpose8_epi32(r);
    for (int e = 0; e < 8; ++e) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(kt + (w0 + e) * 8), r[e]);
    }
  }
  if constexpr (kWords % 8 != 0) {
    constexpr int kTail = kWords % 8;
    static_assert(kTail == 2 || kTail == 4);
    if (pf != nullptr) pf->step();
    for (int i = 0; i < 8; ++i) {
      const auto* p = reinterpret_cast<const __m128i*>(rows[i] + 4 * w0);
      r[i] = _mm256_zextsi128_si256(kTail == 4 ? _mm_loadu_si128(p) : _mm_loadl_epi64(p));
    }
    transpose8_epi32(r);
    for (int e = 0; e < kTail; ++e) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(kt + (w0 + e) * 8), r[e]);
    }
  }
}

// s[h] = the 8 keys' scores (before int8's row scale) for kN heads (qp + h kHd), from the
// transposed tile kt.
template <bool kVnni, KvDtype D, int kHd, int kN>
[[gnu::noinline]] void int8_score_tile(const float* qp, const int32_t* kt, __m256* s) {
  using L = Layout8<D, kHd>;
  if constexpr (L::kI4) {
    const __m256i nib = _mm256_set1_epi32(0x000f000f);
    __m256 acc[kN];
    for (int h = 0; h < kN; ++h) acc[h] = _mm256_setzero_ps();
    for (int g = 0; g < L::kGroups; ++g) {
      __m256i a[kN];
      for (int h = 0; h < kN; ++h) a[h] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        const int w = 4 * g + l;
        const __m256i t = _mm256_load_si256(reinterpret_cast<const __m256i*>(kt + w * 8));
#pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) {
          const __m256i u = _mm256_and_si256(b == 0 ? t : _mm256_srli_epi32(t, 4 * b), nib);
#pragma GCC unroll 4
          for (int h = 0; h < kN; ++h) {
            a[h] = madd_add<kVnni>(a[h], u, bcast_dword(qp + h * kHd + 4 * w + b));
          }
        }
      }
      const __m256i pw =
          _mm256_load_si256(reinterpret_cast<const __m256i*>(kt + (L::kCodeWords + g) * 8));
      // The 8 f16 scales (low halves) and minima (high halves) as f32.
      const __m256i sm = _mm256_permute4x64_epi64(
          _mm256_packus_epi32(_mm256_and_si256(pw, _mm256_set1_epi32(0xffff)),
                              _mm256_srli_epi32(pw, 16)),
          0xd8);
      const __m256 scale = _mm256_cvtph_ps(_mm256_castsi256_si128(sm));
      const __m256 mn = _mm256_cvtph_ps(_mm256_extracti128_si256(sm, 1));
      for (int h = 0; h < kN; ++h) {
        acc[h] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(a[h]), acc[h]);
        acc[h] = _mm256_fmadd_ps(mn, _mm256_set1_ps(qp[h * kHd + L::kSumAt + g]), acc[h]);
      }
    }
    for (int h = 0; h < kN; ++h) {
      s[h] = _mm256_mul_ps(acc[h], _mm256_set1_ps(qp[h * kHd + L::kScaleAt]));
    }
  } else {
    __m256i a[kN];
    for (int h = 0; h < kN; ++h) a[h] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int w = 0; w < L::kCodeWords; ++w) {
      const __m256i t = _mm256_load_si256(reinterpret_cast<const __m256i*>(kt + w * 8));
      const __m256i e02 = _mm256_srai_epi16(_mm256_slli_epi16(t, 8), 8);
      const __m256i e13 = _mm256_srai_epi16(t, 8);
#pragma GCC unroll 8
      for (int h = 0; h < kN; ++h) {
        a[h] = madd_add<kVnni>(a[h], e02, bcast_dword(qp + h * kHd + 2 * w));
        a[h] = madd_add<kVnni>(a[h], e13, bcast_dword(qp + h * kHd + 2 * w + 1));
      }
    }
    for (int h = 0; h < kN; ++h) {
      s[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(a[h]), _mm256_set1_ps(qp[h * kHd + L::kScaleAt]));
    }
  }
}

// Heads per score pass: accumulators within the 16 registers beside the unpacked codes.
template <KvDtype D>
constexpr int kScorePass = D == KvDtype::kI4 ? 4 : 8;

template <bool kVnni, KvDtype D, int kHd, int kN>
inline void int8_score_pass(int n, const float* qp, const int32_t* kt, __m256* s) {
  if (n == kN) return int8_score_tile<kVnni, D, kHd, kN>(qp, kt, s);
  if constexpr (kN > 1) int8_score_pass<kVnni, D, kHd, kN - 1>(n, qp, kt, s);
}

// sc[g kB + j] = the scores of heads g < group (prepared q at qp + g kHd) and keys j < nb
// (records rows[j], int8 row scales rs[j]), 8 keys at a time.
template <bool kVnni, KvDtype D, int kHd, class PF>
void int8_group_scores(const float* qp, int64_t group, const uint8_t* const* rows,
                       const float* rs, int64_t nb, PF& pf, float* sc) {
  using L = Layout8<D, kHd>;
  constexpr int kP = kScorePass<D>;
  alignas(32) int32_t kt[L::kTWords * 8];
  const uint8_t* r[8];
  __m256 s[kP];
  for (int64_t j0 = 0; j0 < nb; j0 += 8) {
    const int nj = nb - j0 < 8 ? static_cast<int>(nb - j0) : 8;
    for (int j = 0; j < 8; ++j) r[j] = rows[j0 + (j < nj ? j : 0)];
    transpose_records8<L::kTWords>(r, &pf, kt);
    for (int64_t g = 0; g < group; g += kP) {
      const int ng = group - g < kP ? static_cast<int>(group - g) : kP;
      int8_score_pass<kVnni, D, kHd, kP>(ng, qp + g * kHd, kt, s);
      for (int h = 0; h < ng; ++h) {
        __m256 v = s[h];
        if constexpr (!L::kI4) v = _mm256_mul_ps(v, Avx2::load_n(rs + j0, nj));
        Avx2::store_n(sc + (g + h) * kB + j0, v, nj);
      }
    }
  }
}

// One KV head's value scales of a key block: times 32767 / smax (t), the minima (int4), and per
// group smax / 32767 and whether a scale or minimum is not finite.
template <KvDtype D, int kHd>
struct VScales8 {
  using L = Layout8<D, kHd>;
  alignas(32) float t[L::kGroups][kB];   // scale_j * 32767 / smax (0 past nb)
  alignas(32) float mn[L::kGroups][kB];  // int4: min_j (0 past nb)
  float mult[L::kGroups];                // smax / 32767
  float bad[L::kGroups];                 // NaN where a scale or minimum is not finite, else 0

  // The raw scales (and minima) of keys j0 .. j0 + n - 1 (records vr[0 .. n)).
  void read(const uint8_t* const* vr, int64_t j0, int64_t n) {
    if constexpr (L::kI4) {
      for (int64_t j = 0; j < n; j += 8) {
        const int c = n - j < 8 ? static_cast<int>(n - j) : 8;
        __m256i words[L::kGroups];  // group g's (scale, min) word of the 8 records
        group_words(vr + j, c, words);
        for (int g = 0; g < L::kGroups; ++g) {
          const __m256i w = words[g];
          const __m256i sm = _mm256_permute4x64_epi64(
              _mm256_packus_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0xffff)),
                                  _mm256_srli_epi32(w, 16)),
              0xd8);
          Avx2::store_n(&t[g][j0 + j], _mm256_cvtph_ps(_mm256_castsi256_si128(sm)), c);
          Avx2::store_n(&mn[g][j0 + j], _mm256_cvtph_ps(_mm256_extracti128_si256(sm, 1)), c);
        }
      }
    } else {
      for (int64_t j = 0; j < n; ++j) t[0][j0 + j] = kv_load_f32(vr[j] + kHd);
    }
  }

  // int4: the kGroups (scale, min) words of records rs[0 .. c) (c <= 8; 0 for the others) as
  // one vector of 8 keys per group, by a 4 x 4 word transpose per 128-bit lane. (Stored by
  // scalar moves and read back as a vector, they stalled on store forwarding: perf, Zen 3.)
  static void group_words(const uint8_t* const* rs, int c, __m256i* out) {
    __m128i r[8];
    for (int i = 0; i < 8; ++i) {
      const auto* p = reinterpret_cast<const __m128i*>(rs[i < c ? i : 0] + kHd / 2);
      const __m128i v = L::kGroups == 4 ? _mm_loadu_si128(p) : _mm_loadl_epi64(p);
      r[i] = i < c ? v : _mm_setzero_si128();
    }
    __m256i a[4];
    for (int i = 0; i < 4; ++i) a[i] = _mm256_setr_m128i(r[i], r[i + 4]);
    const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t2 = _mm256_unpacklo_epi32(a[2], a[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    if constexpr (L::kGroups == 4) {
      const __m256i t1 = _mm256_unpackhi_epi32(a[0], a[1]);
      const __m256i t3 = _mm256_unpackhi_epi32(a[2], a[3]);
      out[2] = _mm256_unpacklo_epi64(t1, t3);
      out[3] = _mm256_unpackhi_epi64(t1, t3);
    }
  }

  // After read() of keys 0 .. nb - 1: zeros past nb, smax per group, t scaled.
  void finish(int64_t nb) {
    for (int g = 0; g < L::kGroups; ++g) {
      for (int64_t j = nb; j < kB; ++j) t[g][j] = mn[g][j] = 0.0f;
    }
    for (int g = 0; g < L::kGroups; ++g) {
      __m256 mx = _mm256_setzero_ps(), nonfinite = _mm256_setzero_ps();
      const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
      for (int64_t j = 0; j < kB; j += 8) {
        const __m256 s = _mm256_load_ps(&t[g][j]);
        // x * 0 is NaN exactly for an inf or a NaN x.
        nonfinite = _mm256_fmadd_ps(s, _mm256_setzero_ps(), nonfinite);
        if constexpr (L::kI4) {
          nonfinite = _mm256_fmadd_ps(_mm256_load_ps(&mn[g][j]), _mm256_setzero_ps(), nonfinite);
        }
        mx = _mm256_max_ps(mx, _mm256_and_ps(s, abs_mask));
      }
      const bool finite =
          _mm256_movemask_ps(_mm256_cmp_ps(nonfinite, nonfinite, _CMP_UNORD_Q)) == 0;
      const float smax = Avx2::reduce_max(mx);
      bad[g] = finite ? 0.0f : NAN;
      // A largest scale of 0 (constant groups) or below 2^-100 leaves the codes' term out: at
      // most 15 * 2^-100 per element (int8: 128 * 2^-100).
      const bool use = finite && smax >= 0x1p-100f;
      mult[g] = use ? smax / 32767.0f : 0.0f;
      const float inv = use ? 32767.0f / smax : 0.0f;
      for (int64_t j = 0; j < kB; j += 8) {
        _mm256_store_ps(&t[g][j], _mm256_mul_ps(_mm256_load_ps(&t[g][j]), _mm256_set1_ps(inv)));
      }
    }
  }
};

// V codes as int16-pair operands: the records of keys 2i and 2i + 1 interleaved (vector v of
// pair i, lane e: both keys' code of one element; int4: group v / 4, elements (v % 4 / 2) * 16 +
// 2e + v % 2; int8: element 8v + e), widened once per KV head and block (head-major) or tile
// (tile order; int4: one and / shift per nibble).
template <KvDtype D, int kHd>
struct VBlock8 {
  using L = Layout8<D, kHd>;
  alignas(32) int32_t codes[kB / 2][L::kVecs][8];
  int64_t pairs = 0;

  // Pairs of keys 0 .. n - 1 (records vr[0 .. n)); a last odd key is paired with itself (its
  // partner's weight is 0).
  template <class PF>
  void load(const uint8_t* const* vr, int64_t n, PF& pf) {
    pairs = (n + 1) / 2;
    for (int64_t i = 0; i < pairs; ++i) {
      const uint8_t* a = vr[2 * i];
      const uint8_t* b = 2 * i + 1 < n ? vr[2 * i + 1] : a;  // its weight is 0
      pf.step();
      if (2 * i + 1 < n) pf.step();
#pragma GCC unroll 8
      for (int c = 0; c < kHd / (L::kI4 ? 32 : 16); ++c) {
        const __m128i xa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * c));
        const __m128i xb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * c));
        const __m128i lo = _mm_unpacklo_epi8(xa, xb), hi = _mm_unpackhi_epi8(xa, xb);
        auto* out = reinterpret_cast<__m256i*>(codes[i][0]);
        if constexpr (L::kI4) {
          const __m256i m = _mm256_set1_epi16(0x000f);
          const __m256i zl = _mm256_cvtepu8_epi16(lo), zh = _mm256_cvtepu8_epi16(hi);
          _mm256_store_si256(out + 4 * c, _mm256_and_si256(zl, m));
          _mm256_store_si256(out + 4 * c + 1, _mm256_and_si256(_mm256_srli_epi16(zl, 4), m));
          _mm256_store_si256(out + 4 * c + 2, _mm256_and_si256(zh, m));
          _mm256_store_si256(out + 4 * c + 3, _mm256_and_si256(_mm256_srli_epi16(zh, 4), m));
        } else {
          _mm256_store_si256(out + 2 * c, _mm256_cvtepi8_epi16(lo));
          _mm256_store_si256(out + 2 * c + 1, _mm256_cvtepi8_epi16(hi));
        }
      }
    }
  }
};

// Group of int16-pair vector v.
template <KvDtype D, int kHd>
constexpr int vec_group(int v) {
  return Layout8<D, kHd>::kI4 ? v / 4 : 0;
}

// Heads per V pass and int16-pair vectors per head: 4 x 2 accumulators, 2 code vectors, a weight.
// Measured against 2 x 4, 6 x 2 and 8 x 1 (bench_attention --isa avx2_vnni, int4, alternating):
// 2 x 4 the same, the others 1.1-1.4x slower.
constexpr int kVPass = 4;
constexpr int kVU = 2;
// Where int8_accumulate_v puts the block's (head-major) or tile's (tile order) integer sums of kN
// heads: out += sums * mult[g] + add[h][g] (f32), or iacc += sums (int32, folded into out once
// per block by fold_v_sums: the same integers, then the same f32 operations).
struct VOut {
  const float* mult = nullptr;  // [kGroups] smax / 32767
  const float* add = nullptr;   // [kN, kGroups]
  float* out = nullptr;         // [kN, kHd]
  int32_t* iacc = nullptr;      // [kN, kHd]
};

// For heads h < kN (weights w16 + h * kGroups * kB int16, from the first pair's key), vectors
// v0 .. v0 + 1: the weighted codes of vb's pairs into o (kI32: o.iacc, else o.out).
template <bool kVnni, KvDtype D, int kHd, int kN, bool kI32>
[[gnu::noinline]] void int8_accumulate_v(const VBlock8<D, kHd>& vb, int v0, const int16_t* w16,
                                         const VOut& o) {
  using L = Layout8<D, kHd>;
  constexpr int kU = kVU;
  const int g = vec_group<D, kHd>(v0);  // v0 even: both vectors in one group
  __m256i acc[kN][kU];
  for (int h = 0; h < kN; ++h) {
    for (int u = 0; u < kU; ++u) {
      acc[h][u] = kI32 ? _mm256_loadu_si256(
                             reinterpret_cast<const __m256i*>(o.iacc + h * kHd + 8 * (v0 + u)))
                       : _mm256_setzero_si256();
    }
  }
  for (int64_t i = 0; i < vb.pairs; ++i) {
    __m256i c[kU];
    for (int u = 0; u < kU; ++u) {
      c[u] = _mm256_load_si256(reinterpret_cast<const __m256i*>(vb.codes[i][v0 + u]));
    }
#pragma GCC unroll 4
    for (int h = 0; h < kN; ++h) {
      int32_t pw;
      std::memcpy(&pw, w16 + (h * L::kGroups + g) * kB + 2 * i, 4);
      const __m256i wb = _mm256_set1_epi32(pw);
      for (int u = 0; u < kU; ++u) acc[h][u] = madd_add<kVnni>(acc[h][u], c[u], wb);
    }
  }
  for (int h = 0; h < kN; ++h) {
    if constexpr (kI32) {
      for (int u = 0; u < kU; ++u) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.iacc + h * kHd + 8 * (v0 + u)),
                            acc[h][u]);
      }
    } else {
      const __m256 m = _mm256_set1_ps(o.mult[g]);
      const __m256 ad = _mm256_set1_ps(o.add[h * L::kGroups + g]);
      for (int u = 0; u < kU; ++u) {
        float* y = o.out + h * kHd + 8 * (v0 + u);
        const __m256 base = _mm256_add_ps(_mm256_loadu_ps(y), ad);
        _mm256_storeu_ps(y, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][u]), m, base));
      }
    }
  }
}

template <bool kVnni, KvDtype D, int kHd, int kN, bool kI32>
inline void int8_accumulate_pass(int n, const VBlock8<D, kHd>& vb, int v0, const int16_t* w16,
                                 const VOut& o) {
  if (n == kN) return int8_accumulate_v<kVnni, D, kHd, kN, kI32>(vb, v0, w16, o);
  if constexpr (kN > 1) int8_accumulate_pass<kVnni, D, kHd, kN - 1, kI32>(n, vb, v0, w16, o);
}

// All int16-pair vectors of vb for heads h < n (weights and sums as int8_accumulate_v's, heads
// advancing kGroups * kB weights, o's pointers kHd and kGroups), kVPass heads at a time.
template <bool kVnni, KvDtype D, int kHd, bool kI32>
void int8_accumulate_heads(int64_t n, const VBlock8<D, kHd>& vb, const int16_t* w16, VOut o) {
  using L = Layout8<D, kHd>;
  for (int64_t g0 = 0; g0 < n; g0 += kVPass) {
    const int np = n - g0 < kVPass ? static_cast<int>(n - g0) : kVPass;
    for (int v0 = 0; v0 < L::kVecs; v0 += kVU) {
      int8_accumulate_pass<kVnni, D, kHd, kVPass, kI32>(np, vb, v0, w16, o);
    }
    w16 += kVPass * L::kGroups * kB;
    if (o.add != nullptr) o.add += kVPass * L::kGroups;
    if (o.out != nullptr) o.out += kVPass * kHd;
    if (o.iacc != nullptr) o.iacc += kVPass * kHd;
  }
}

// The block's weights p (<= 1; heads hh < nc at p + hh kB, keys j < nb) times the value scales
// of vs, rounded to int16 against the block's largest scale: w16 [nc, kGroups, kB]; add [nc,
// kGroups]: (int4) sum p * min per group, NaN for a NaN weight (from a NaN score: the head's
// outputs come out NaN, as in the f32 loop) or a scale that is not finite.
template <KvDtype D, int kHd>
void block_weights(const VScales8<D, kHd>& vs, const float* p, int64_t nc, int64_t nb,
                   int16_t* w16, float* add) {
  using L = Layout8<D, kHd>;
  const __m256i lim = _mm256_set1_epi32(32767);
  for (int64_t hh = 0; hh < nc; ++hh) {
    const float* ph = p + hh * kB;
    __m256 pv[kB / 8];
    __m256 bad = _mm256_setzero_ps();
    for (int k = 0; k < kB / 8; ++k) {
      const int64_t left = nb - 8 * k;
      pv[k] = left >= 8  ? _mm256_loadu_ps(ph + 8 * k)
              : left > 0 ? Avx2::load_n(ph + 8 * k, static_cast<int>(left))
                         : _mm256_setzero_ps();
      bad = _mm256_fmadd_ps(pv[k], _mm256_setzero_ps(), bad);
    }
    const float nan = _mm256_movemask_ps(_mm256_cmp_ps(bad, bad, _CMP_UNORD_Q)) != 0 ? NAN : 0.0f;
    for (int g = 0; g < L::kGroups; ++g) {
      int16_t* w = w16 + (hh * L::kGroups + g) * kB;
      __m256 ms = _mm256_setzero_ps();
      for (int k = 0; k < kB / 8; k += 2) {
        const __m256i r0 = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(pv[k], _mm256_load_ps(&vs.t[g][8 * k]))), lim);
        const __m256i r1 = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(pv[k + 1], _mm256_load_ps(&vs.t[g][8 * k + 8]))),
            lim);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + 8 * k),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(r0, r1), 0xd8));
        if constexpr (L::kI4) {
          ms = _mm256_fmadd_ps(pv[k], _mm256_load_ps(&vs.mn[g][8 * k]), ms);
          ms = _mm256_fmadd_ps(pv[k + 1], _mm256_load_ps(&vs.mn[g][8 * k + 8]), ms);
        }
      }
      const float msum = L::kI4 ? Avx2::reduce_add(ms) : 0.0f;
      add[hh * L::kGroups + g] = msum + nan + vs.bad[g];
    }
  }
}

// Tile order's per-thread state of one range: every KV head's value scales, weights and int32
// V sums of the current key block.
template <KvDtype D, int kHd>
struct TileState8 {
  std::vector<VScales8<D, kHd>> scales;  // [n_kv]
  std::vector<int16_t> w16;              // [heads, kGroups, kB]
  std::vector<float> add;                // [heads, kGroups]
  std::vector<int32_t> iacc;             // [heads, kHd], zero between blocks (fold_v_sums)

  static TileState8& get(int64_t n_kv, int64_t heads) {
    using L = Layout8<D, kHd>;
    thread_local TileState8 s;
    s.scales.resize(static_cast<size_t>(n_kv));
    s.w16.resize(static_cast<size_t>(heads * L::kGroups * kB));
    s.add.resize(static_cast<size_t>(heads * L::kGroups));
    s.iacc.resize(static_cast<size_t>(heads * kHd), 0);  // every block ends folded, so zero
    return s;
  }
};

// out [heads, kHd] += iacc * mult + add per group (int8_accumulate_v's f32 operations, in its
// order), iacc zeroed.
template <KvDtype D, int kHd>
void fold_v_sums(TileState8<D, kHd>& ts, int64_t group, int64_t heads, float* out) {
  using L = Layout8<D, kHd>;
  for (int64_t hh = 0; hh < heads; ++hh) {
    const float* mult = ts.scales[static_cast<size_t>(hh / group)].mult;
    for (int v = 0; v < L::kVecs; ++v) {
      const int g = vec_group<D, kHd>(v);
      auto* ip = reinterpret_cast<__m256i*>(ts.iacc.data() + hh * kHd + 8 * v);
      float* y = out + hh * kHd + 8 * v;
      const __m256 ad = _mm256_set1_ps(ts.add[hh * L::kGroups + g]);
      const __m256 base = _mm256_add_ps(_mm256_loadu_ps(y), ad);
      _mm256_storeu_ps(y, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256(ip)),
                                          _mm256_set1_ps(mult[g]), base));
      _mm256_storeu_si256(ip, _mm256_setzero_si256());
    }
  }
}

template <bool kVnni, KvDtype D, int kHd>
void int8_attention_range(const detail::AttentionRange& a) {
  using L = Layout8<D, kHd>;
  const int64_t group = a.group;
  const int64_t n_kv = a.n_kv, heads = n_kv * group;
  const int64_t head_bytes = kv_head_bytes(D, kHd);
  float* qp = a.scratch;         // [heads, kHd]: the prepared q (Layout8)
  float* mx = qp + heads * kHd;  // [n_kv, group] running maxima
  float* sum = mx + heads;       // [n_kv, group] running sums
  float* sc = sum + heads;       // [group, kB] scores, then weights (one KV head's; tile
                                 // order: [n_kv, group, kB])
  // Read before out is written (out may overlap q).
  if (!prep_q8<D, kHd>(a.q, a.scale, heads, qp)) return detail::attention_range_avx2(a);
  start_range(a, kHd, mx, sum);
  const uint8_t* kb[kB];
  const uint8_t* vb[kB];
  const uint8_t* kr[kB];
  const uint8_t* vr[kB];
  alignas(32) float ks[kB];
  const uint8_t* next_rows[2 * kB];
  VBlock8<D, kHd> vblock;
  VScales8<D, kHd> vscales;
  alignas(32) int16_t w16[L::kChunk * L::kGroups * kB];
  float add[L::kChunk * L::kGroups];
  SpreadPrefetch<false> pf;
  const bool tiles = n_kv > 1 && n_kv * head_bytes > kIntTileRowBytes;
  TileState8<D, kHd>* ts = tiles ? &TileState8<D, kHd>::get(n_kv, heads) : nullptr;
  for (int64_t j0 = a.first; j0 <= a.last; j0 += kB) {
    const int64_t nb = a.last - j0 + 1 < kB ? a.last - j0 + 1 : kB;
    key_block_rows(a, j0, nb, kb, vb);
    const int64_t nbn = next_block_rows(a, j0, next_rows);
    const int64_t score_steps = (nb + 7) / 8 * ((L::kTWords + 7) / 8);
    pf.start(next_rows, 2 * nbn, n_kv * head_bytes, n_kv * (score_steps + nb));
    if (tiles) {
      // The scores of 8 keys for every KV head in turn, then the next 8 keys; the softmax per
      // KV head; the value scales and then the codes the same way, the V sums kept in int32
      // until the block ends.
      for (int64_t j = 0; j < nb; j += 8) {
        const int64_t nt = nb - j < 8 ? nb - j : 8;
        for (int64_t h = 0; h < n_kv; ++h) {
          for (int64_t i = 0; i < nt; ++i) {
            kr[i] = kb[j + i] + h * head_bytes;
            if constexpr (!L::kI4) ks[i] = kv_load_f32(kr[i] + kHd);
          }
          int8_group_scores<kVnni, D, kHd>(qp + h * group * kHd, group, kr, ks, nt, pf,
                                           sc + h * group * kB + j);
        }
      }
      for (int64_t h = 0; h < n_kv; ++h) {
        softmax_block<Avx2>(sc + h * group * kB, group, nb, kHd, mx + h * group,
                            sum + h * group, a.out + h * group * kHd);
      }
      for (int64_t j = 0; j < nb; j += 8) {
        const int64_t nt = nb - j < 8 ? nb - j : 8;
        for (int64_t h = 0; h < n_kv; ++h) {
          for (int64_t i = 0; i < nt; ++i) vr[i] = vb[j + i] + h * head_bytes;
          ts->scales[h].read(vr, j, nt);
        }
      }
      for (int64_t h = 0; h < n_kv; ++h) {
        ts->scales[h].finish(nb);
        block_weights(ts->scales[h], sc + h * group * kB, group, nb,
                      ts->w16.data() + h * group * L::kGroups * kB,
                      ts->add.data() + h * group * L::kGroups);
      }
      for (int64_t j = 0; j < nb; j += 8) {
        const int64_t nt = nb - j < 8 ? nb - j : 8;
        for (int64_t h = 0; h < n_kv; ++h) {
          for (int64_t i = 0; i < nt; ++i) vr[i] = vb[j + i] + h * head_bytes;
          vblock.load(vr, nt, pf);
          VOut o;
          o.iacc = ts->iacc.data() + h * group * kHd;
          int8_accumulate_heads<kVnni, D, kHd, true>(
              group, vblock, ts->w16.data() + h * group * L::kGroups * kB + j, o);
        }
      }
      fold_v_sums(*ts, group, heads, a.out);
      pf.drain();
      continue;
    }
    for (int64_t h = 0; h < n_kv; ++h) {
      float* acc = a.out + h * group * kHd;  // [group, kHd]
      for (int64_t i = 0; i < nb; ++i) {
        kr[i] = kb[i] + h * head_bytes;
        vr[i] = vb[i] + h * head_bytes;
      }
      if constexpr (!L::kI4) {
        for (int64_t i = 0; i < nb; ++i) ks[i] = kv_load_f32(kr[i] + kHd);
      }
      int8_group_scores<kVnni, D, kHd>(qp + h * group * kHd, group, kr, ks, nb, pf, sc);
      softmax_block<Avx2>(sc, group, nb, kHd, mx + h * group, sum + h * group, acc);
      vblock.load(vr, nb, pf);
      vscales.read(vr, 0, nb);
      vscales.finish(nb);
      for (int64_t c0 = 0; c0 < group; c0 += L::kChunk) {
        const int64_t nc = group - c0 < L::kChunk ? group - c0 : L::kChunk;
        block_weights(vscales, sc + c0 * kB, nc, nb, w16, add);
        VOut o;
        o.mult = vscales.mult;
        o.add = add;
        o.out = acc + c0 * kHd;
        int8_accumulate_heads<kVnni, D, kHd, false>(nc, vblock, w16, o);
      }
    }
    pf.drain();
  }
  if constexpr (L::kI4) {
    // Per 16 elements of a group: the even ones, then the odd ones -> element order.
    for (int64_t h = 0; h < heads; ++h) {
      for (int c = 0; c < kHd / 16; ++c) {
        float* o = a.out + h * kHd + 16 * c;
        const __m256 ev = _mm256_loadu_ps(o), od = _mm256_loadu_ps(o + 8);
        const __m256 lo = _mm256_unpacklo_ps(ev, od), hi = _mm256_unpackhi_ps(ev, od);
        _mm256_storeu_ps(o, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
      }
    }
  }
  finish_range<Avx2>(a, mx, sum);
}

template <bool kVnni>
void int8_range_any(const detail::AttentionRange& a) {
  const bool hd64 = a.head_dim == 64, hd128 = a.head_dim == 128;
  if (a.dtype == KvDtype::kI4 && hd64) return int8_attention_range<kVnni, KvDtype::kI4, 64>(a);
  if (a.dtype == KvDtype::kI4 && hd128) return int8_attention_range<kVnni, KvDtype::kI4, 128>(a);
  if (a.dtype == KvDtype::kI8 && hd64) return int8_attention_range<kVnni, KvDtype::kI8, 64>(a);
  if (a.dtype == KvDtype::kI8 && hd128) return int8_attention_range<kVnni, KvDtype::kI8, 128>(a);
  detail::attention_range_avx2(a);
}

}  // namespace

namespace detail {

void attention_range_int_avx2(const AttentionRange& a) {
  if (has_vex_vnni()) return int8_range_any<true>(a);
  int8_range_any<false>(a);
}

}  // namespace detail
}  // namespace sampan::cpu
