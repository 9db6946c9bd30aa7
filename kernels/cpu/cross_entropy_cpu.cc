#include "kernels/cpu/cross_entropy_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

}  // namespace

template <class T>
double cross_entropy_forward(int64_t rows, int64_t vocab, const T* logits, int64_t ld,
                             const int32_t* targets, int32_t ignore, TaskRunner& runner) {
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
  util::parallel_for(runner, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (targets[r] == ignore) continue;
      const T* l = logits + r * ld;
      row_loss[static_cast<size_t>(r)] = logsumexp(vocab, l) - static_cast<double>(l[targets[r]]);
    }
  });
  double sum = 0;
  for (double v : row_loss) sum += v;
  return sum;
}

template <class T>
void cross_entropy_backward(int64_t rows, int64_t vocab, const T* logits, int64_t ld,
                            const int32_t* targets, int32_t ignore, double dloss, T* dlogits,
                            int64_t lddl, TaskRunner& runner) {
  util::parallel_for(runner, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* l = logits + r * ld;
      T* d = dlogits + r * lddl;
      if (targets[r] == ignore) {
        std::fill(d, d + vocab, T(0));
        continue;
      }
      const double lse = logsumexp(vocab, l);
      for (int64_t i = 0; i < vocab; ++i) {
        d[i] = static_cast<T>(dloss * std::exp(static_cast<double>(l[i]) - lse));
      }
      d[targets[r]] = static_cast<T>(static_cast<double>(d[targets[r]]) - dloss);
    }
  });
}

#define SAMPAN_INSTANTIATE(T)                                                                   \
  template double cross_entropy_forward<T>(int64_t, int64_t, const T*, int64_t, const int32_t*, \
                                           int32_t, TaskRunner&);                               \
  template void cross_entropy_backward<T>(int64_t, int64_t, const T*, int64_t, const int32_t*,  \
                                          int32_t, double, T*, int64_t, TaskRunner&);
SAMPAN_INSTANTIATE(float)
SAMPAN_INSTANTIATE(double)
#undef SAMPAN_INSTANTIATE

}  // namespace sampan::cpu
