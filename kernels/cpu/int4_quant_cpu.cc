// INT4 quantization of a weight group (int4_quant_cpu.h), on AVX2: 8 elements per vector, the
// same f32 operations as the scalar definition (vdivps, vroundps to nearest even, f32 product)
// and the squared error in double, 4 + 4 partial sums by FMA. The scalar loops this replaces called
// libm's nearbyintf per element and summed the error in one dependent chain: quantizing with the
// scale search (11 candidates per group, the default with --hadamard) ran at 27 M weights/s on a
// Zen 5 core, so loading a 1.1B model took 27 s.
#include "kernels/cpu/int4_quant_cpu.h"

#include <immintrin.h>

namespace sampan::cpu {
namespace {

// The candidate's codes of x[c .. c + 8) as f32 (integers in [-8, 7]).
inline __m256 codes8(const float* x, __m256 scale, __m256 zero) {
  const __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x), scale),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, zero), _mm256_set1_ps(-8.0f)),
                       _mm256_set1_ps(7.0f));
}

}  // namespace

bool int4_group_range(const float* x, int64_t g, float* lo, float* hi) {
  __m256 vlo = _mm256_setzero_ps(), vhi = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int64_t c = 0; c < g; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    vlo = _mm256_min_ps(vlo, v);
    vhi = _mm256_max_ps(vhi, v);
    const __m256 d = _mm256_sub_ps(v, v);  // 0, or NaN for an infinity or a NaN
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(bad) != 0) return false;
  alignas(32) float l[8], h[8];
  _mm256_store_ps(l, vlo);
  _mm256_store_ps(h, vhi);
  float a = l[0], b = h[0];
  for (int i = 1; i < 8; ++i) {
    a = l[i] < a ? l[i] : a;
    b = h[i] > b ? h[i] : b;
  }
  *lo = a;
  *hi = b;
  return true;
}

void int4_group_codes(const float* x, int64_t g, float scale, int zero, int8_t* codes) {
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(static_cast<float>(zero));
  for (int64_t c = 0; c < g; c += 8) {
    const __m256i q = _mm256_cvtps_epi32(codes8(x + c, s, z));  // exact: integers
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + c), _mm_packs_epi16(w, w));
  }
}

namespace {

// Candidates [0, N) of the batch, every 8 elements of the group in turn; sums in registers.
template <int N>
void errors_batch(const float* x, int64_t g, const float* scales, const int* zeros,
                  double* errors) {
  __m256 s[N], z[N];
  __m256d e_lo[N], e_hi[N];
  for (int i = 0; i < N; ++i) {
    s[i] = _mm256_set1_ps(scales[i]);
    z[i] = _mm256_set1_ps(static_cast<float>(zeros[i]));
    e_lo[i] = e_hi[i] = _mm256_setzero_pd();
  }
  for (int64_t c = 0; c < g; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    const __m256d v_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d v_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const __m256 p = _mm256_mul_ps(_mm256_sub_ps(codes8(x + c, s[i], z[i]), z[i]), s[i]);
      const __m256d d_lo = _mm256_sub_pd(v_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
      const __m256d d_hi = _mm256_sub_pd(v_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
      e_lo[i] = _mm256_fmadd_pd(d_lo, d_lo, e_lo[i]);
      e_hi[i] = _mm256_fmadd_pd(d_hi, d_hi, e_hi[i]);
    }
  }
  for (int i = 0; i < N; ++i) {
    alignas(32) double a[4], b[4];
    _mm256_store_pd(a, e_lo[i]);
    _mm256_store_pd(b, e_hi[i]);
    errors[i] = ((a[0] + a[1]) + (a[2] + a[3])) + ((b[0] + b[1]) + (b[2] + b[3]));
  }
}

}  // namespace

void int4_group_errors(const float* x, int64_t g, const float* scales, const int* zeros, int n,
                       double* errors) {
  // Batches of up to 4: 8 sums, 8 scale and zero vectors and the widened x fit 16 registers.
  int i = 0;
  for (; i + 4 <= n; i += 4) errors_batch<4>(x, g, scales + i, zeros + i, errors + i);
  switch (n - i) {
    case 3: return errors_batch<3>(x, g, scales + i, zeros + i, errors + i);
    case 2: return errors_batch<2>(x, g, scales + i, zeros + i, errors + i);
    case 1: return errors_batch<1>(x, g, scales + i, zeros + i, errors + i);
    default: return;
  }
}

}  // namespace sampan::cpu
