// Decode (m < kGgmlPrefillMinM) of GGUF Q6_K on AVX512-VNNI: against x rounded to int8 per 256
// elements (the x8 kernel of gemm_ggml.h), with GemmPrecision::kBf16 (vnni_x8, gemm_quant.h: the
// precision that rounds x to 8 bits in the integer prefill too, as llama.cpp rounds its
// activations to Q8_K for this type); and against x16 at the default precision (at the end).
// Q4_K and Q5_K have their own kernels (gemm_ggml_q4k_avx512_vnni.cc).
//
// Why: the x16 kernels (gemm_ggml_avx512.cc, gemm_ggml_x16_avx2.cc) widen every 4- or 6-bit code
// to an int16 lane and multiply it by its sub-block scale (vpmullw) before vpdpwssd: about 11
// port-0 operations per 64 weights, so one core computed 10-12 GB/s of Q6_K with the weights in
// cache (Emerald Rapids, bench_gemm_ggml --cached), no faster than it reads them from memory.
// Here the codes stay bytes: vpmaddubsw multiplies 64 unsigned codes with 64 x8 into 32 int16
// pair sums (exact: |code| <= 63, |x8| <= 127, 2 * 63 * 127 < 2^15) and vpdpwssd multiplies those
// by the group scales (int16, repeated in both halves of a dword) into int32 lanes for the whole
// block: 2 multiplying instructions per 64 weights and row of x, the scale vectors one vpermd
// each per row of W, not per row of x.
//
// Prepared x, per 256-element block (kX8BlockFloats floats, 64-byte aligned): bytes [0, 256) x8 =
// round(x / s) in element order, s = absmax / 127; int16 at floats [64, 72) the sums of x8 over
// each 16-element group (Q6_K's codes are q + 32); float 72 s. A block holding an inf or NaN has
// x8 = 0, sums 0 and s = NaN (its outputs come out NaN); one with absmax below 2^-100 counts as
// zero (s = 0).
//
// Q6_K (210 bytes: 128 of low nibbles ql, 64 of high bits qh, 16 int8 scales, f16 d): per half n of
// 128 elements, ql[64 n + l] holds elements 128 n + l (low nibble, l < 64) and 128 n + 64 + l (high
// nibble), qh[32 n + l] their top two bits (element 128 n + 32 j + l takes bits 2 j, 2 j + 1), so
// the codes of one half are two vectors of 64 in element order. w = d sc_g (code - 32) per
// 16-element group g: the integer sum is sum_g sc_g (sum code x8 - 32 sum x8), the second term one
// vpmaddwd of the 16 scales with the 16 group sums per block and row of x. Lanes stay below
// 4 * 2 * (2 * 63 * 127) * 128 + 32 * 16 * 2032 * 128 < 2^31.
//
// Error (gemm_ggml.h, kX8Error): x is off by s / 2 = absmax_b / 254 per element plus f32
// roundings (s, 1 / s, x / s) under 2^-22 absmax_b; the integer sums are exact; then one
// conversion to f32 and one FMA with d s per block, the x16 kernels' f32 summation term.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_ggml_avx512.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/ggml_dequant.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kRows = 4;  // R: rows of W per call
constexpr int kMaxM = 4;  // rows of x per pass
static_assert(kRows <= kGgmlMaxRows && kMaxM <= kGgmlMaxM);

constexpr int64_t kX8BlockFloats = 80;
constexpr int kSub16Sums = 64;  // floats holding 16 int16: sum of x8 per 16-element group
constexpr int kScaleAt = 72;    // float: s

// f(std::integral_constant<int, mb>) for mb = 1 .. kMaxM (larger mb: kMaxM): the kernels'
// rows of x as a compile-time count.
template <class F>
inline void by_mb(int mb, F&& f) {
  static_assert(kMaxM == 4);
  switch (mb) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

int64_t x8_floats(int64_t k) { return k / 256 * kX8BlockFloats; }

void prep_x8(const float* x, int64_t k, float* out) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + 256 * b;
    float* o = out + b * kX8BlockFloats;
    float sx, inv;
    const bool nonfinite = block_x_scale(xb, 256, static_cast<float>(kX8Max), &sx, &inv);
    auto* q = reinterpret_cast<int8_t*>(o);
    auto* s16 = reinterpret_cast<int16_t*>(o + kSub16Sums);
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int g = 0; g < 16; ++g) {
      // A non-finite block keeps x8 = 0 (inf * 0 would convert to INT_MIN).
      const __m512i v =
          nonfinite ? _mm512_setzero_si512()
                    : _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * g), vinv),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * g), _mm512_cvtsepi32_epi8(v));
      s16[g] = static_cast<int16_t>(_mm512_reduce_add_epi32(v));  // |sum| <= 16 * 127
    }
    o[kScaleAt] = sx;
    for (int j = kScaleAt + 1; j < kX8BlockFloats; ++j) o[j] = 0.0f;
  }
}

// The codes (0..63, unsigned bytes) of half n of a Q6_K block p, in element order: lo elements
// 128 n .. 128 n + 63, hi 128 n + 64 .. 128 n + 127.
inline void q6k_codes64(const uint8_t* p, int n, __m512i& lo, __m512i& hi) {
  const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  const __m512i a = _mm512_loadu_si512(p + 64 * n);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * n));
  // Bytes 0..31: qh[l] (bits of elements l, l + 64); 32..63: qh[l] >> 2 (l + 32, l + 96).
  const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
  // (a & 0x0f) | (bits 0-1 of hz) << 4, and (a >> 4) | (bits 4-5 of hz): 0xea = A & B | C.
  lo = _mm512_ternarylogic_epi32(a, m0f, _mm512_and_si512(_mm512_slli_epi16(hz, 4), m30), 0xea);
  hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 4), m0f, _mm512_and_si512(hz, m30), 0xea);
}

// Dword lanes 8 h .. 8 h + 7 of the result hold scale a (h = 0) or b (h = 1), repeated in both
// int16 halves: the vpdpwssd operand for 64 weights whose pair sums are sub-blocks a and b.
inline __m512i idx_2x8(int a, int b) {
  return _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
}
inline __m512i idx_4x4(int a) {
  return _mm512_setr_epi32(a, a, a, a, a + 1, a + 1, a + 1, a + 1, a + 2, a + 2, a + 2, a + 2,
                           a + 3, a + 3, a + 3, a + 3);
}
// Signed 32-bit lanes (|v| < 2^15) to the int16 pair (v, v) of each dword.
inline __m512i pair16(__m512i v) {
  return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xffff)),
                         _mm512_slli_epi32(v, 16));
}

template <int MB>
void dot_q6k_x8_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                   float* out) {
  const __m512i idx[4] = {idx_4x4(0), idx_4x4(4), idx_4x4(8), idx_4x4(12)};
  over_blocks<kRows, MB, 210>(rows, k, out, [&](int64_t b, const uint8_t* p, __m512(&acc)[MB]) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    const __m512i scv = pair16(_mm512_cvtepi8_epi32(sc8));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const float d = f16_at(p + 208);
    __m512i ai[MB];
    for (int i = 0; i < MB; ++i) ai[i] = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      __m512i lo, hi;
      q6k_codes64(p, n, lo, hi);
      const __m512i s_lo = _mm512_permutexvar_epi32(idx[2 * n], scv);
      const __m512i s_hi = _mm512_permutexvar_epi32(idx[2 * n + 1], scv);
      for (int i = 0; i < MB; ++i) {
        const auto* xq = reinterpret_cast<const int8_t*>(x + i * ldx + b * kX8BlockFloats);
        ai[i] = _mm512_dpwssd_epi32(
            ai[i], _mm512_maddubs_epi16(lo, _mm512_load_si512(xq + 128 * n)), s_lo);
        ai[i] = _mm512_dpwssd_epi32(
            ai[i], _mm512_maddubs_epi16(hi, _mm512_load_si512(xq + 128 * n + 64)), s_hi);
      }
    }
    for (int i = 0; i < MB; ++i) {
      const float* xb = x + i * ldx + b * kX8BlockFloats;
      // 32 sum_g sc_g (sum of x8 over g): the codes' offset.
      const __m256i corr = _mm256_madd_epi16(
          sc16, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + kSub16Sums)));
      const __m512i t = _mm512_sub_epi32(ai[i], _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(d * xb[kScaleAt]), acc[i]);
    }
  });
}

void dot_q6k_x8(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb,
                float* out) {
  by_mb(mb, [&](auto m) { dot_q6k_x8_mb<decltype(m)::value>(rows, k, x, ldx, out); });
}

// ---- Q6_K against x16 (the default precision) ----
//
// The codes as above, minus 32 (signed bytes -32..31), widened to int16 and multiplied by their
// group's int8 scale (|(q - 32) sc| <= 32 * 128 = 4096), then vpdpwssd with x16 as the AVX-512
// prep_x16 lays it out (gemm_ggml_avx512.cc: 256 int16 in element order per block, s at float
// kGgmlX16ScaleAt). A lane takes 8 products of pairs per block: at most 8 * 2 * 4096 * 32767 <
// 2^31, and the sum of a lane is that of its own elements' |w| |x16|, so its one conversion to
// f32 per block rounds relative to those (the bound's f32 term). The AVX2 x16 kernel this
// replaces on AVX512-VNNI (gemm_ggml_x16_avx2.cc) assembles the codes 32 at a time in ymm.
// Tried in stop 47 (Zen 5, 1 thread, bench_gemm_ggml, alternating): the codes kept as bytes
// against x16 split into two int8 planes, as gemm_ggml_q4k_avx512_vnni.cc does for Q4_K: m = 1
// 1.15-1.19x with the weights in cache, but 0.94-1.04x streaming them from DRAM, 0.74x at m = 4
// (4 multiplying instructions per 64 weights and row of x instead of 2), and Q4_K_M decode end to
// end unchanged (51.3 tok/s either way): not kept. A prefetch 3 rows ahead instead of 1.5 gave
// Q6_K 1.1x streaming but nothing end to end either. In that decode the Q6_K down_proj streams
// 26 GB/s where Q4_K's streams 36 (6 % of the step).
template <int MB>
void dot_q6k_x16_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                    float* out) {
  const __m512i m32 = _mm512_set1_epi8(32);
  // Int16 lanes 0..15 (dwords 0..7) take group g's scale, 16..31 group g + 1's: g = 0, 2, .., 14
  // (vpermd of the scales paired in dwords, as the x8 kernels build theirs).
  __m512i idx[8];
  for (int j = 0; j < 8; ++j) idx[j] = idx_2x8(2 * j, 2 * j + 1);
  over_blocks<kRows, MB, 210>(rows, k, out, [&](int64_t b, const uint8_t* p, __m512(&acc)[MB]) {
    const __m512i scv = pair16(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
    const float d = f16_at(p + 208);
    __m512i ai[MB];
    for (int i = 0; i < MB; ++i) ai[i] = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      __m512i lo, hi;
      q6k_codes64(p, n, lo, hi);
      lo = _mm512_sub_epi8(lo, m32);
      hi = _mm512_sub_epi8(hi, m32);
      // Elements 128 n + 32 j .. + 31 (groups 8 n + 2 j, 8 n + 2 j + 1), j = 0..3.
      const __m256i q[4] = {_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1),
                            _mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1)};
      for (int j = 0; j < 4; ++j) {
        const __m512i w = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q[j]),
                                             _mm512_permutexvar_epi32(idx[4 * n + j], scv));
        for (int i = 0; i < MB; ++i) {
          const auto* xq = reinterpret_cast<const int16_t*>(x + i * ldx + b * kGgmlX16BlockFloats);
          ai[i] = _mm512_dpwssd_epi32(ai[i], w, _mm512_load_si512(xq + 128 * n + 32 * j));
        }
      }
    }
    for (int i = 0; i < MB; ++i) {
      const float* xb = x + i * ldx + b * kGgmlX16BlockFloats;
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[i]), _mm512_set1_ps(d * xb[kGgmlX16ScaleAt]),
                               acc[i]);
    }
  });
}

}  // namespace

void ggml_q6k_x16_dot_avx512_vnni(const uint8_t* const* rows, int64_t k, const float* x,
                                  int64_t ldx, int mb, float* out) {
  by_mb(mb, [&](auto m) { dot_q6k_x16_mb<decltype(m)::value>(rows, k, x, ldx, out); });
}

GgmlDotTable ggml_x8_dot_avx512_vnni(GgmlType type) {
  GgmlDotTable t;
  if (type == GgmlType::kQ6_K) t = {kRows, kMaxM, dot_q6k_x8, true, x8_floats, prep_x8, true};
  return t;
}

}  // namespace sampan::cpu::gemm_detail
