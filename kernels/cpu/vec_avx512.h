// 16-lane f32 vector operations for the AVX-512 kernels, with the same names as vec_avx2.h.
//
// Include only from *_avx512.cc / *_amx.cc translation units. Internal linkage throughout, for
// the reason given in vec_avx2.h.
#pragma once

// GCC 12's AVX-512 intrinsics initialise their "don't care" operands from themselves, which
// -Wmaybe-uninitialized and -Wuninitialized then report at nearly every use (GCC bug 105593);
// nothing reads them.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

namespace sampan::cpu {
namespace {

struct Avx512 {
  static constexpr int kWidth = 16;
  using V = __m512;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }

  static __mmask16 lane_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  // The first n lanes (0 <= n <= kWidth) from p, the others zero; memory past p + n is not read.
  static V load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(lane_mask(n), p); }
  static void store_n(float* p, V v, int n) { _mm512_mask_storeu_ps(p, lane_mask(n), v); }

  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  static V fms(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }  // a * b - c
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  // What vec_math_impl.h's exp / erf / tanh use besides the above (as vec_avx2.h's, on 16 lanes).
  using M = __mmask16;
  static V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
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
  static V select(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }  // a where m
  static V pow2_split(V p, V n) {
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i half = _mm512_srai_epi32(ni, 1);
    const __m512i bias = _mm512_set1_epi32(127);
    const V s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23));
    const V s2 = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, half), bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  }

  static __m256 half_sum(V v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  }
  static float reduce_add(V v) {
    const __m256 h = half_sum(v);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V v) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Lane i of the result is the sum of all lanes of a[i] (a: kWidth vectors): pairs folded with
  // unpack + add inside 128-bit blocks, then the blocks transposed and added, 45 instructions
  // for 16 sums.
  static V transpose_sum(const V* a) {
    __m512 t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                           _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    }
    __m512 u[4];  // u[i]: the partial sums of keys 4i..4i+3, one set per 128-bit block
#pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
      const __m512d lo =
          _mm512_unpacklo_pd(_mm512_castps_pd(t[2 * i]), _mm512_castps_pd(t[2 * i + 1]));
      const __m512d hi =
          _mm512_unpackhi_pd(_mm512_castps_pd(t[2 * i]), _mm512_castps_pd(t[2 * i + 1]));
      u[i] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
    }
    // Blocks: w[0] = [u0 b0+b1, u0 b2+b3, u1 b0+b1, u1 b2+b3], w[1] likewise for u2, u3.
    __m512 w[2];
#pragma GCC unroll 8
    for (int i = 0; i < 2; ++i) {
      w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xdd));
    }
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88),
                         _mm512_shuffle_f32x4(w[0], w[1], 0xdd));
  }

  // e^x, same reduction and polynomial as Avx2::exp; vscalefps applies 2^n with one rounding
  // and handles overflow to inf and gradual underflow by itself.
  static V exp(V x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
};

// The rounding scale of a block of x (x[0, n), n a multiple of 16) for the integer kernels that
// round x to xmax levels (GGUF decode): s = absmax / xmax and inv = xmax / absmax; a block
// holding an inf or NaN gets s = NaN and inv = 0 (its outputs come out NaN; returns true), one
// with absmax below 2^-100 s = inv = 0 (taken as zero: an error below 2^-100 sum |w|).
inline bool block_x_scale(const float* x, int64_t n, float xmax, float* s, float* inv) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 mx = _mm512_setzero_ps(), bad = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) {
    const __m512 v = _mm512_loadu_ps(x + c);
    mx = _mm512_max_ps(mx, _mm512_and_ps(v, abs_mask));
    bad = _mm512_fmadd_ps(v, _mm512_setzero_ps(), bad);  // NaN once an inf or NaN went in
  }
  const float absmax = _mm512_reduce_max_ps(mx);
  *s = 0.0f;
  *inv = 0.0f;
  if (_mm512_cmp_ps_mask(bad, bad, _CMP_UNORD_Q) != 0) {
    *s = __builtin_nanf("");
    return true;
  }
  if (absmax >= 0x1p-100f) {
    *s = absmax / xmax;
    *inv = xmax / absmax;
  }
  return false;
}

}  // namespace
}  // namespace sampan::cpu
