// AVX-512 conversions between f32 and bf16/f16, bit-exact with kernels/common/half.h (see
// convert_cpu.cc for why bf16 rounding is done in integers). Masked loads and stores handle the
// tails, and NaN lanes are patched with a mask instead of a scalar detour.
// GCC 12's AVX-512 intrinsics initialise their "don't care" operands from themselves, which
// -Wmaybe-uninitialized and -Wuninitialized then report at nearly every use (GCC bug 105593);
// nothing reads them.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

namespace sampan::cpu::detail {
namespace {

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// 16 f32 bit patterns -> 16 bf16, round to nearest even, NaN quietened (bit 6 set).
inline __m256i bf16_round16(__m512i u) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

// 16 f32 -> 16 f16, round to nearest even; NaN becomes sign | 0x7e00 like f32_to_f16.
inline __m256i f16_round16(__m512 x) {
  const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  if (nan == 0) return h;
  const __m512i sign =
      _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 16), _mm512_set1_epi32(0x8000));
  const __m256i canon = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
  return _mm256_mask_blend_epi16(nan, h, canon);
}

}  // namespace

void convert_f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = bf16_round16(_mm512_loadu_si512(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = bf16_round16(_mm512_maskz_loadu_epi32(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

void convert_f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), f16_round16(_mm512_loadu_ps(src + i)));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, f16_round16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

void convert_bf16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(u, 16));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(u, 16));
  }
}

// Exact except that signalling NaNs come out quietened (see convert_cpu.cc).
void convert_f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

}  // namespace sampan::cpu::detail
