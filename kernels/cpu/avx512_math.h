// exp, sigmoid, erf and tanh on 16 f32 lanes: the operations of avx2_math.h in the same order
// (vec_math_impl.h), so every lane gives avx2_math.h's bits. Include only from files built for
// AVX-512 (*_avx512.cc and above).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/vec_math_impl.h"

namespace sampan::cpu::avx512_math {

// vec_math_impl.h's operations on 16 lanes.
struct Ops {
  using V = __m512;
  using M = __mmask16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V round(V x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static V abs(V x) {
    return _mm512_castsi512_ps(
        _mm512_andnot_si512(_mm512_set1_epi32(INT32_MIN), _mm512_castps_si512(x)));
  }
  static V sign(V x) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  }
  static V or_(V a, V b) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
  static M gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M ge(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static V select(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
  static V pow2_split(V p, V n) {
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i half = _mm512_srai_epi32(ni, 1);
    const V s1 = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(127)), 23));
    const V s2 = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_add_epi32(_mm512_sub_epi32(ni, half), _mm512_set1_epi32(127)), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  }
};

inline __m512 exp16(__m512 x) { return vec_math::exp<Ops>(x); }
inline __m512 sigmoid16(__m512 x) { return vec_math::sigmoid<Ops>(x); }
inline __m512 erf16(__m512 a) { return vec_math::erf<Ops>(a); }
inline __m512 tanh16(__m512 x) { return vec_math::tanh<Ops>(x); }
inline __m512 gelu16(__m512 x) { return vec_math::gelu<Ops>(x); }
inline __m512 gelu_tanh16(__m512 x) { return vec_math::gelu_tanh<Ops>(x); }

}  // namespace sampan::cpu::avx512_math
