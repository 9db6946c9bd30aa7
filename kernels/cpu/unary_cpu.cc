// Element-wise f32 functions (unary_cpu.h). The transcendental kinds run 8 lanes at a time on
// AVX2 (the baseline): exp by range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial, erf
// by N. Juffa's two-interval minimax form (erf(x) = x P(x^2) near 0, 1 - exp(t Q(t)) beyond),
// tanh by its Taylor series near 0 (where 1 - 2 / (e^2x + 1) cancels) and by exp beyond.
// Tails shorter than a vector go through the same code on a padded copy.
#include "kernels/cpu/unary_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sampan::cpu {
namespace {

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

// One vector of a vectorised kind.
inline __m256 apply8(const UnaryParams& p, __m256 x) {
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f);
  switch (p.kind) {
    case UnaryKind::kRelu: return _mm256_max_ps(x, _mm256_setzero_ps());
    case UnaryKind::kSigmoid: return sigmoid8(x);
    case UnaryKind::kTanh: return tanh8(x);
    case UnaryKind::kErf: return erf8(x);
    case UnaryKind::kExp: return exp8(x);
    case UnaryKind::kSilu: return _mm256_mul_ps(x, sigmoid8(x));
    case UnaryKind::kGelu: {
      const __m256 e = erf8(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, e));
    }
    case UnaryKind::kGeluTanh: {
      const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      const __m256 in = _mm256_mul_ps(_mm256_set1_ps(0.79788456080286536f),
                                      _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, tanh8(in)));
    }
    case UnaryKind::kHardSigmoid: {
      const __m256 v = _mm256_fmadd_ps(_mm256_set1_ps(p.alpha), x, _mm256_set1_ps(p.beta));
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), one);
    }
    case UnaryKind::kHardSwish: {
      __m256 g = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), half);
      g = _mm256_min_ps(_mm256_max_ps(g, _mm256_setzero_ps()), one);
      return _mm256_mul_ps(x, g);
    }
    case UnaryKind::kClip:
      return _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(p.min)), _mm256_set1_ps(p.max));
    case UnaryKind::kLeakyRelu: {
      const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
      return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(p.alpha)), neg);
    }
    case UnaryKind::kNeg: return _mm256_xor_ps(x, sign_bit());
    case UnaryKind::kAbs: return abs8(x);
    case UnaryKind::kSqrt: return _mm256_sqrt_ps(x);
    case UnaryKind::kReciprocal: return _mm256_div_ps(one, x);
    case UnaryKind::kFloor: return _mm256_floor_ps(x);
    case UnaryKind::kCeil: return _mm256_ceil_ps(x);
    case UnaryKind::kLog:
    case UnaryKind::kSoftplus:
      break;  // scalar: see apply1
  }
  return x;
}

// The kinds left to the C library.
inline float apply1(UnaryKind kind, float x) {
  if (kind == UnaryKind::kLog) return std::log(x);
  // softplus: log1p(exp(x)), exact to f32 as x itself once exp(-x) is below half an ulp.
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

void run_chunk(const UnaryParams& p, const float* x, float* y, int64_t n) {
  if (p.kind == UnaryKind::kLog || p.kind == UnaryKind::kSoftplus) {
    for (int64_t i = 0; i < n; ++i) y[i] = apply1(p.kind, x[i]);
    return;
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, apply8(p, _mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {};
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(buf, x + i, bytes);
    _mm256_store_ps(buf, apply8(p, _mm256_load_ps(buf)));
    std::memcpy(y + i, buf, bytes);
  }
}

}  // namespace

void unary_f32(const UnaryParams& p, const float* x, float* y, int64_t n, TaskRunner& runner) {
  if (n <= 0) return;
  // Chunks of 16K floats (64 KB): enough work per task to hide the dispatch.
  constexpr int64_t kChunk = 16384;
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  if (n_chunks == 1) {
    run_chunk(p, x, y, n);
    return;
  }
  runner.run(n_chunks, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    run_chunk(p, x + begin, y + begin, std::min(kChunk, n - begin));
  });
}

}  // namespace sampan::cpu
