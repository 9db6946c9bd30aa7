// exp, sigmoid, erf and tanh on 8 f32 lanes (AVX2, the CPU baseline), shared by the element-wise
// kernels (unary_cpu.cc) and the fused bias + activation epilogue of the matmuls (binary_cpu.cc),
// so that a fused GELU gives the same bits as the unfused Gelu op; avx512_math.h runs the same
// operations on 16 lanes (vec_math_impl.h), bit for bit.
// exp: range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial; erf: N. Juffa's
// two-interval minimax form (erf(x) = x P(x^2) near 0, 1 - exp(t Q(t)) beyond), within 2e-7
// absolute; tanh: its Taylor series near 0 (where 1 - 2 / (e^2x + 1) cancels) and exp beyond.
// Include only from files built with AVX2 and FMA.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/vec_math_impl.h"

namespace sampan::cpu::avx2_math {

// vec_math_impl.h's operations on 8 lanes.
struct Ops {
  using V = __m256;
  using M = __m256;  // all-ones lanes
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V abs(V x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  static V sign(V x) { return _mm256_and_ps(x, _mm256_set1_ps(-0.0f)); }
  static V or_(V a, V b) { return _mm256_or_ps(a, b); }
  static M gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M ge(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static V select(M m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
  static V pow2_split(V p, V n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(ni, 1);
    const V s1 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
    const V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
};

inline __m256 exp8(__m256 x) { return vec_math::exp<Ops>(x); }
inline __m256 sign_bit() { return _mm256_set1_ps(-0.0f); }
inline __m256 abs8(__m256 x) { return Ops::abs(x); }
inline __m256 sigmoid8(__m256 x) { return vec_math::sigmoid<Ops>(x); }
inline __m256 erf8(__m256 a) { return vec_math::erf<Ops>(a); }
inline __m256 tanh8(__m256 x) { return vec_math::tanh<Ops>(x); }
inline __m256 gelu8(__m256 x) { return vec_math::gelu<Ops>(x); }
inline __m256 gelu_tanh8(__m256 x) { return vec_math::gelu_tanh<Ops>(x); }

}  // namespace sampan::cpu::avx2_math
