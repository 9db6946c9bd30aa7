#include "kernels/cpu/layer_norm_cpu.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

constexpr int64_t kBlock = 1024;  // elements per f32 partial sum (see the header)

// sum over the row of f(x[i]) with f(v) = v - shift (squared when `square`).
template <bool kSquare>
double row_sum(const float* x, int64_t n, float shift) {
  const __m256 vs = _mm256_set1_ps(shift);
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = b + kBlock < n ? b + kBlock : n;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = b;
    for (; i + 16 <= end; i += 16) {
      __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vs);
      __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs);
      if constexpr (kSquare) {
        acc0 = _mm256_fmadd_ps(d0, d0, acc0);
        acc1 = _mm256_fmadd_ps(d1, d1, acc1);
      } else {
        acc0 = _mm256_add_ps(acc0, d0);
        acc1 = _mm256_add_ps(acc1, d1);
      }
    }
    for (; i < end; i += 8) {
      const int rest = end - i < 8 ? static_cast<int>(end - i) : 8;
      // Masked-off lanes load 0; subtracting the shift would count them, so mask after.
      __m256 d = _mm256_sub_ps(Avx2::load_n(x + i, rest), vs);
      d = _mm256_and_ps(d, _mm256_castsi256_ps(Avx2::lane_mask(rest)));
      if constexpr (kSquare) {
        acc0 = _mm256_fmadd_ps(d, d, acc0);
      } else {
        acc0 = _mm256_add_ps(acc0, d);
      }
    }
    total += static_cast<double>(Avx2::reduce_add(_mm256_add_ps(acc0, acc1)));
  }
  return total;
}

void norm_row(int64_t n, const float* x, const float* scale, const float* bias, float eps,
              float* y) {
  // A first rough mean from the first element keeps the f32 partial sums small when every
  // value sits far from zero; the exact mean follows in double.
  const float pivot = x[0];
  const float mean = static_cast<float>(pivot + row_sum<false>(x, n, pivot) / n);
  const double var = row_sum<true>(x, n, mean) / static_cast<double>(n);
  const float rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
  const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
  int64_t i = 0;
  for (; i < n; i += 8) {
    const int rest = n - i < 8 ? static_cast<int>(n - i) : 8;
    const bool full = rest == 8;
    __m256 v = full ? _mm256_loadu_ps(x + i) : Avx2::load_n(x + i, rest);
    v = _mm256_mul_ps(_mm256_sub_ps(v, vm), vr);
    if (scale)
      v = _mm256_mul_ps(v, full ? _mm256_loadu_ps(scale + i) : Avx2::load_n(scale + i, rest));
    if (bias) v = _mm256_add_ps(v, full ? _mm256_loadu_ps(bias + i) : Avx2::load_n(bias + i, rest));
    if (full) {
      _mm256_storeu_ps(y + i, v);
    } else {
      Avx2::store_n(y + i, v, rest);
    }
  }
}

}  // namespace

void layer_norm(int64_t rows, int64_t n, const float* x, int64_t ldx, const float* scale,
                const float* bias, float eps, float* y, int64_t ldy, TaskRunner& runner) {
  if (rows <= 0 || n <= 0) return;
  util::parallel_for(runner, rows, util::ceil_div(16384, n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) norm_row(n, x + r * ldx, scale, bias, eps, y + r * ldy);
  });
}

}  // namespace sampan::cpu
