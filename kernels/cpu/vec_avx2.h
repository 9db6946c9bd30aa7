// 8-lane f32 vector operations for the AVX2+FMA kernels. vec_avx512.h offers the same names for
// 16 lanes, so one template (row_kernels.h, attention_impl.h) serves both instruction sets.
//
// Include only from translation units compiled with the baseline kernel flags (not *_avx512.cc).
// Everything here has internal linkage: an inline function compiled under two different target
// flags must never be merged by the linker, or an AVX2-only CPU could run the AVX-512 copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace sampan::cpu {
namespace {

struct Avx2 {
  static constexpr int kWidth = 8;
  using V = __m256;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }

  static __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // The first n lanes (0 <= n <= kWidth) from p, the others zero; memory past p + n is not read.
  static V load_n(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
  // A whole vector by a plain store: AMD cores up to Zen 3 at least run a vmaskmovps store as
  // many micro-ops (perf on a Zen 3 VM found them among the integer attention loop's hottest
  // instructions), Intel's as one or two.
  static void store_n(float* p, V v, int n) {
    if (n == kWidth) return _mm256_storeu_ps(p, v);
    _mm256_maskstore_ps(p, lane_mask(n), v);
  }

  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
  static V fms(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }  // a * b - c
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  // What vec_math_impl.h's exp / erf / tanh use besides the above (lane masks as all-ones
  // lanes; pow2_split: p * 2^(n >> 1) * 2^(n - (n >> 1)) for an integral n in [-126, 128]).
  using M = __m256;
  static V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V abs(V x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  static V sign(V x) { return _mm256_and_ps(x, _mm256_set1_ps(-0.0f)); }
  static V or_(V a, V b) { return _mm256_or_ps(a, b); }
  static M gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M ge(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static V select(M m, V a, V b) { return _mm256_blendv_ps(b, a, m); }  // a where m
  static V pow2_split(V p, V n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(ni, 1);
    const __m256i bias = _mm256_set1_epi32(127);
    const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    const V s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }

  static float reduce_add(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Lane i of the result is the sum of all lanes of a[i] (a: kWidth vectors). Pairs are folded
  // with unpack + add, 21 instructions for 8 sums instead of 8 separate reductions.
  static V transpose_sum(const V* a) {
    __m256 t[4];
#pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                           _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    }
    __m256 u[2];  // u[i]: the partial sums of keys 4i..4i+3, per 128-bit half
#pragma GCC unroll 8
    for (int i = 0; i < 2; ++i) {
      const __m256d lo =
          _mm256_unpacklo_pd(_mm256_castps_pd(t[2 * i]), _mm256_castps_pd(t[2 * i + 1]));
      const __m256d hi =
          _mm256_unpackhi_pd(_mm256_castps_pd(t[2 * i]), _mm256_castps_pd(t[2 * i + 1]));
      u[i] = _mm256_add_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
                         _mm256_permute2f128_ps(u[0], u[1], 0x31));
  }

  // e^x to about 1 ulp for normal results; 0 below about -103.9, inf above 88.72, NaN kept.
  // x = n ln2 + r with |r| <= ln2/2 (ln2 split in a short high part, so n * high is exact, plus
  // a correction); e^r by its degree-7 Taylor polynomial, whose truncation error (< 1e-8
  // relative) is below f32 rounding; 2^n applied as two factors so that n down to -150 reaches
  // the subnormals with a single rounding and n = 128 overflows to inf as it should.
  static V exp(V x) {
    // max/min return their second operand when one is NaN, so NaN passes through the clamp.
    x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
};

// The largest |x[i]| of x[0, n) (n a multiple of 8) and whether every x[i] is finite: the scale
// of the integer roundings of x in the quantized decode kernels, which must see an infinity or a
// NaN (their integers cannot hold one) to make the outputs NaN as f32 arithmetic would.
struct AbsMax {
  float value = 0.0f;
  bool finite = true;
};
inline AbsMax absmax_avx2(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int64_t c = 0; c < n; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    m = _mm256_max_ps(m, _mm256_and_ps(v, abs_mask));
    bad = _mm256_fmadd_ps(v, _mm256_setzero_ps(), bad);  // NaN once an inf or NaN went in
  }
  return {Avx2::reduce_max(m), _mm256_movemask_ps(_mm256_cmp_ps(bad, bad, _CMP_UNORD_Q)) == 0};
}

// round(x[0..8) * inv) to nearest even as int32 (the integer kernels' rounding of x).
inline __m256i round_scaled_epi32(const float* x, __m256 inv) {
  return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), inv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The sum of the 8 int32 lanes of v.
inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// An 8 x 8 transpose of 32-bit words: r[c] dword j -> r[j] dword c.
inline void transpose8_epi32(__m256i r[8]) {
  __m256i a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    b[4 * i] = _mm256_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm256_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm256_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm256_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
  }
}

// VEX-encoded VNNI on 256-bit registers (AVX-VNNI), in asm: the baseline files are compiled
// without the flag and call these only where isa.h's has_vex_vnni() holds.
// a += the pairwise int16 products of w and x, summed into int32 lanes (vpdpwssd).
inline void dpwssd_vex(__m256i& a, __m256i w, __m256i x) {
  asm("%{vex%} vpdpwssd %2, %1, %0" : "+x"(a) : "x"(w), "x"(x));
}
// a += the products of the unsigned bytes u and the signed bytes x, summed by 4 (vpdpbusd).
inline void dpbusd_vex(__m256i& a, __m256i u, __m256i x) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(a) : "x"(u), "x"(x));
}
// a + the pairwise int16 products of w and x: dpwssd_vex with kVnni, else vpmaddwd and vpaddd.
// The same int32 lanes either way as long as none overflows.
template <bool kVnni>
inline __m256i madd_add(__m256i a, __m256i w, __m256i x) {
  if constexpr (kVnni) {
    dpwssd_vex(a, w, x);
    return a;
  } else {
    return _mm256_add_epi32(a, _mm256_madd_epi16(w, x));
  }
}
// In place, for kernels that keep many accumulators in registers (the integer prefill tile):
// acc += the pairwise int16 products of w and x (madd_acc), or the products of the unsigned
// bytes u and signed bytes x summed by 4 (dpbusd_acc). With kVnni the VEX VNNI instruction;
// else the AVX2 sequence in asm through one scratch register (as intrinsics GCC hoisted every
// multiply of a 6-row tile ahead of its adds and spilled the accumulators to the stack each
// step). Without VNNI dpbusd_acc is vpmaddubsw, vpmaddwd by ones, vpaddd: vpmaddubsw saturates
// its int16 pair sums, so the lanes equal vpdpbusd's only where every u0 x0 + u1 x1 lies in
// int16 (u <= 129 for |x| <= 127: the caller's bound to keep).
template <bool kVnni>
inline void madd_acc(__m256i& acc, __m256i w, __m256i x) {
  if constexpr (kVnni) {
    dpwssd_vex(acc, w, x);
  } else {
    __m256i t;
    asm("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(t) : "x"(w), "x"(x));
  }
}
alignas(32) inline constexpr int16_t kOnes16[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                                    1, 1, 1, 1, 1, 1, 1, 1};
template <bool kVnni>
inline void dpbusd_acc(__m256i& acc, __m256i u, __m256i x) {
  if constexpr (kVnni) {
    dpbusd_vex(acc, u, x);
  } else {
    __m256i t;
    asm("vpmaddubsw %3, %2, %1\n\tvpmaddwd %4, %1, %1\n\tvpaddd %1, %0, %0"
        : "+x"(acc), "=&x"(t)
        : "x"(u), "x"(x), "m"(*reinterpret_cast<const __m256i*>(kOnes16)));
  }
}

}  // namespace
}  // namespace sampan::cpu
