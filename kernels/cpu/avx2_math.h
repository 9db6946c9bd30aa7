// exp, sigmoid, erf and tanh on 8 f32 lanes (AVX2, the CPU baseline), shared by the element-wise
// kernels (unary_cpu.cc) and the fused bias + activation epilogue of the matmuls (binary_cpu.cc),
// so that a fused GELU gives the same bits as the unfused Gelu op.
// exp: range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial; erf: N. Juffa's
// two-interval minimax form (erf(x) = x P(x^2) near 0, 1 - exp(t Q(t)) beyond), within 2e-7
// absolute; tanh: its Taylor series near 0 (where 1 - 2 / (e^2x + 1) cancels) and exp beyond.
// Include only from files built with AVX2 and FMA.
#pragma once

#include <immintrin.h>

namespace sampan::cpu::avx2_math {

inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 split so that n * hi is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n, n in [-126, 128]: split in two factors so that n = 128 (x near 88.7) does not overflow
  // the exponent field.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

inline __m256 sign_bit() { return _mm256_set1_ps(-0.0f); }

inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(sign_bit(), x); }

inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

inline __m256 erf8(__m256 a) {
  const __m256 t = abs8(a);
  const __m256 s = _mm256_mul_ps(a, a);
  // |a| <= 0.927734375: erf(a) = a + a * P(a^2).
  __m256 p = _mm256_set1_ps(-5.96761703e-4f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(4.99119423e-3f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-2.67681349e-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.12819925e-1f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-3.76125336e-1f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.28379166e-1f));
  const __m256 small = _mm256_fmadd_ps(p, a, a);
  // Beyond: erf(|a|) = 1 - exp(Q(|a|)).
  __m256 r = _mm256_fmadd_ps(_mm256_set1_ps(-1.72853470e-5f), t, _mm256_set1_ps(3.83197126e-4f));
  const __m256 u =
      _mm256_fmadd_ps(_mm256_set1_ps(-3.88396438e-3f), t, _mm256_set1_ps(2.42546219e-2f));
  r = _mm256_fmadd_ps(r, s, u);
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-1.06777877e-1f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-6.34846687e-1f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-1.28717512e-1f));
  r = _mm256_fmadd_ps(r, t, _mm256_sub_ps(_mm256_setzero_ps(), t));
  __m256 large = _mm256_sub_ps(_mm256_set1_ps(1.0f), exp8(r));
  large = _mm256_or_ps(large, _mm256_and_ps(a, sign_bit()));  // copysign (large >= 0)
  const __m256 is_large = _mm256_cmp_ps(t, _mm256_set1_ps(0.927734375f), _CMP_GT_OQ);
  return _mm256_blendv_ps(small, large, is_large);
}

inline __m256 tanh8(__m256 x) {
  const __m256 t = abs8(x);
  // |x| < 0.4: odd Taylor series through x^13 (the next term is below 2e-9 there).
  const __m256 s = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(21844.0f / 6081075.0f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-1382.0f / 155925.0f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(62.0f / 2835.0f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), x, x);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_add_ps(t, t));
  __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  large = _mm256_or_ps(large, _mm256_and_ps(x, sign_bit()));
  return _mm256_blendv_ps(small, large, _mm256_cmp_ps(t, _mm256_set1_ps(0.4f), _CMP_GE_OQ));
}

}  // namespace sampan::cpu::avx2_math
