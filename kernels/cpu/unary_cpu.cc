// Element-wise f32 functions (unary_cpu.h). The transcendental kinds run 8 lanes at a time on
// AVX2 (the baseline), on avx2_math.h's exp, erf and tanh.
// Tails shorter than a vector go through the same code on a padded copy.
#include "kernels/cpu/unary_cpu.h"

#include "kernels/cpu/avx2_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sampan::cpu {
namespace {

using namespace avx2_math;

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
    case UnaryKind::kGelu: return gelu8(x);
    case UnaryKind::kGeluTanh: return gelu_tanh8(x);
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
