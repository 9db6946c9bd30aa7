#include "kernels/cpu/cross_entropy_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/softmax_cpu.h"
#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

template <class T>
double logsumexp(int64_t n, const T* x) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

// The float rows (the training graph's logits, a vocabulary wide): the max in f32, e^(x - max)
// by the kernels' vector exp (~1 ulp), the sum accumulated in double. A row whose max is not
// finite (all -inf, an inf or a NaN) takes the double loop above, which gives what the formula
// gives. Scalar double exp cost ~2 ns per logit: at a 32000 vocabulary the loss and its
// gradient outweighed the LM head's GEMMs.
double logsumexp_f32(int64_t n, const float* x) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float mx = Avx2::reduce_max(vmax);
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  if (!std::isfinite(mx)) return logsumexp(n, x);
  // softmax_cpu.h: e^(x - mx) (0 instead of denormals below e^-86.6), summed in double.
  return static_cast<double>(mx) + std::log(exp_shifted(n, x, mx, nullptr));
}

double row_logsumexp(int64_t n, const float* x) { return logsumexp_f32(n, x); }
double row_logsumexp(int64_t n, const double* x) { return logsumexp(n, x); }

// d[i] = dloss * e^(l[i] - lse) over a row (d may equal l). For dloss > 0 (every loss this
// trains) as e^(l[i] - (lse - ln dloss)) through exp_shifted, so that a product below f32's
// normal range is 0, not a denormal (a microcode assist per lane: at dloss = 1 / 2048 every
// logit 79 below the row's log-sum-exp made one).
void softmax_scaled(int64_t n, const float* l, double lse, double dloss, float* d) {
  if (dloss > 0.0) {
    exp_shifted(n, l, static_cast<float>(lse - std::log(dloss)), d);
    return;
  }
  const __m256 vl = _mm256_set1_ps(static_cast<float>(lse));
  const __m256 vs = _mm256_set1_ps(static_cast<float>(dloss));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Avx2::exp(_mm256_sub_ps(_mm256_loadu_ps(l + i), vl));
    _mm256_storeu_ps(d + i, _mm256_mul_ps(vs, e));
  }
  if (i < n) {
    const int r = static_cast<int>(n - i);
    const __m256 e = Avx2::exp(_mm256_sub_ps(Avx2::load_n(l + i, r), vl));
    Avx2::store_n(d + i, _mm256_mul_ps(vs, e), r);
  }
}

void softmax_scaled(int64_t n, const double* l, double lse, double dloss, double* d) {
  for (int64_t i = 0; i < n; ++i) d[i] = dloss * std::exp(l[i] - lse);
}

}  // namespace

template <class T>
double cross_entropy_forward(int64_t rows, int64_t vocab, const T* logits, int64_t ld,
                             const int32_t* targets, int32_t ignore, TaskRunner& runner,
                             float* row_lse) {
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
  util::parallel_for(runner, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (targets[r] == ignore) {
        if (row_lse != nullptr) row_lse[2 * r] = row_lse[2 * r + 1] = 0.0f;
        continue;
      }
      const T* l = logits + r * ld;
      const double lse = row_logsumexp(vocab, l);
      if (row_lse != nullptr) {
        const float hi = static_cast<float>(lse);
        row_lse[2 * r] = hi;
        row_lse[2 * r + 1] = std::isfinite(hi) ? static_cast<float>(lse - hi) : 0.0f;
      }
      row_loss[static_cast<size_t>(r)] = lse - static_cast<double>(l[targets[r]]);
    }
  });
  double sum = 0;
  for (double v : row_loss) sum += v;
  return sum;
}

template <class T>
void cross_entropy_backward(int64_t rows, int64_t vocab, const T* logits, int64_t ld,
                            const int32_t* targets, int32_t ignore, double dloss, T* dlogits,
                            int64_t lddl, TaskRunner& runner, const float* row_lse) {
  util::parallel_for(runner, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* l = logits + r * ld;
      T* d = dlogits + r * lddl;
      if (targets[r] == ignore) {
        std::fill(d, d + vocab, T(0));
        continue;
      }
      const double lse =
          row_lse != nullptr
              ? static_cast<double>(row_lse[2 * r]) + static_cast<double>(row_lse[2 * r + 1])
              : row_logsumexp(vocab, l);
      if (!std::isfinite(lse)) {  // the formula's NaN/inf, element by element
        for (int64_t i = 0; i < vocab; ++i) {
          d[i] = static_cast<T>(dloss * std::exp(static_cast<double>(l[i]) - lse));
        }
      } else {
        softmax_scaled(vocab, l, lse, dloss, d);
      }
      d[targets[r]] = static_cast<T>(static_cast<double>(d[targets[r]]) - dloss);
    }
  });
}

#define SAMPAN_INSTANTIATE(T)                                                                   \
  template double cross_entropy_forward<T>(int64_t, int64_t, const T*, int64_t, const int32_t*, \
                                           int32_t, TaskRunner&, float*);                       \
  template void cross_entropy_backward<T>(int64_t, int64_t, const T*, int64_t, const int32_t*,  \
                                          int32_t, double, T*, int64_t, TaskRunner&,            \
                                          const float*);
SAMPAN_INSTANTIATE(float)
SAMPAN_INSTANTIATE(double)
#undef SAMPAN_INSTANTIATE

}  // namespace sampan::cpu
