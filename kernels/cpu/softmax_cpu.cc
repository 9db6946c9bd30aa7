#include "kernels/cpu/softmax_cpu.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

// Below this, e^v is taken as 0 (softmax and exp_shifted): from it up, Avx2::exp's 2^n has
// n >= -125 and its results are normal floats. Avx2::exp itself goes on into the subnormals (to
// e^-103.9), each a microcode assist on Intel cores, and then so do the products that read
// them. Masked positions (an additive mask of -10000, BERT's padding) and scores far below the
// row's max have every such lane there: bench-style rows of 128 with 32 / 96 masked took 3.3x /
// 7.6x the unmasked time before (1,536 rows, one core).
constexpr float kExpFloor = -86.6f;

// e^v where v >= kExpFloor, else 0. NaN stays NaN (the compare is false for it, and max
// returns its second operand when one is NaN).
inline __m256 exp_floored(__m256 v) {
  const __m256 low = _mm256_cmp_ps(v, _mm256_set1_ps(kExpFloor), _CMP_LT_OQ);
  return _mm256_andnot_ps(low, Avx2::exp(_mm256_max_ps(_mm256_set1_ps(kExpFloor), v)));
}

// exp_floored(v); the sum of its 8 lanes added to acc in double.
inline __m256 exp_or_zero(__m256 v, __m256d& acc_lo, __m256d& acc_hi) {
  const __m256 e = exp_floored(v);
  acc_lo = _mm256_add_pd(acc_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  acc_hi = _mm256_add_pd(acc_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  return e;
}

inline int tail(int64_t n, int64_t i) { return n - i < 8 ? static_cast<int>(n - i) : 8; }

// The exp and sum pass of a row: y = e^(x - mx), returns the sum. kFloor: through exp_floored
// (the row reaches below kExpFloor from its max), else Avx2::exp alone.
template <bool kFloor>
float exp_pass(int64_t n, const float* x, float mx, float* y) {
  const __m256 vm = _mm256_set1_ps(mx);
  auto ex = [](__m256 v) { return kFloor ? exp_floored(v) : Avx2::exp(v); };
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ex(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const int r = tail(n, i);
    const __m256 e = _mm256_and_ps(ex(_mm256_sub_ps(Avx2::load_n(x + i, r), vm)),
                                   _mm256_castsi256_ps(Avx2::lane_mask(r)));
    Avx2::store_n(y + i, e, r);
    acc = _mm256_add_ps(acc, e);
  }
  return Avx2::reduce_add(acc);
}

void softmax_row(int64_t n, const float* x, float* y) {
  // The max and the min in one pass: rows that stay within kExpFloor of their max (no masked
  // entries) skip exp_floored's extra operations (measured 6.5 % of the softmax).
  __m256 vmax = _mm256_set1_ps(-INFINITY), vmin = _mm256_set1_ps(INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmax = _mm256_max_ps(vmax, v);
    vmin = _mm256_min_ps(vmin, v);
  }
  float mx = Avx2::reduce_max(vmax);
  float mn = -Avx2::reduce_max(_mm256_sub_ps(_mm256_setzero_ps(), vmin));
  for (; i < n; ++i) {
    mx = x[i] > mx ? x[i] : mx;
    mn = x[i] < mn ? x[i] : mn;
  }
  // Not (mn - mx >= kExpFloor): also NaN rows, which either pass gives NaN.
  const float sum =
      mn - mx >= kExpFloor ? exp_pass<false>(n, x, mx, y) : exp_pass<true>(n, x, mx, y);
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  if (i < n) Avx2::store_n(y + i, _mm256_mul_ps(Avx2::load_n(y + i, tail(n, i)), inv), tail(n, i));
}

// Up to 8 adjacent columns c..c+w of one outer slice: rows of the axis are `inner` apart.
void softmax_cols(int64_t n, int64_t inner, int w, const float* x, float* y) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; ++j) vmax = _mm256_max_ps(vmax, Avx2::load_n(x + j * inner, w));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m256 e = exp_floored(_mm256_sub_ps(Avx2::load_n(x + j * inner, w), vmax));
    Avx2::store_n(y + j * inner, e, w);
    acc = _mm256_add_ps(acc, e);
  }
  const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), acc);
  for (int64_t j = 0; j < n; ++j) {
    Avx2::store_n(y + j * inner, _mm256_mul_ps(Avx2::load_n(y + j * inner, w), inv), w);
  }
}

}  // namespace

double exp_shifted(int64_t n, const float* x, float shift, float* y) {
  const __m256 vs = _mm256_set1_ps(shift);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_or_zero(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), lo, hi);
    if (y != nullptr) _mm256_storeu_ps(y + i, e);
  }
  if (i < n) {
    const int r = tail(n, i);
    // Lanes past n: -inf, so e = 0 there.
    const __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), Avx2::load_n(x + i, r),
                                      _mm256_castsi256_ps(Avx2::lane_mask(r)));
    const __m256 e = exp_or_zero(_mm256_sub_ps(v, vs), lo, hi);
    if (y != nullptr) Avx2::store_n(y + i, e, r);
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(lo, hi));
  return (t[0] + t[1]) + (t[2] + t[3]);
}

void softmax(int64_t outer, int64_t n, int64_t inner, const float* x, float* y,
             TaskRunner& runner) {
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  if (inner == 1) {
    util::parallel_for(runner, outer, util::ceil_div(8192, n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) softmax_row(n, x + r * n, y + r * n);
    });
    return;
  }
  const int64_t groups = util::ceil_div(inner, 8);
  util::parallel_for(runner, outer * groups, util::ceil_div(8192, n * 8),
                     [&](int64_t u0, int64_t u1) {
                       for (int64_t u = u0; u < u1; ++u) {
                         const int64_t o = u / groups, c = (u % groups) * 8;
                         const int64_t off = o * n * inner + c;
                         softmax_cols(n, inner, tail(inner, c), x + off, y + off);
                       }
                     });
}

}  // namespace sampan::cpu
