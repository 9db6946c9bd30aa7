#include "kernels/cpu/rms_norm_grad_cpu.h"

#include <cmath>

#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

template <class T>
double inv_rms(int64_t dim, const T* x, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
}

}  // namespace

template <class T>
void rms_norm_ref(int64_t rows, int64_t dim, const T* x, const T* w, double eps, T* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const double s = inv_rms(dim, x + r * dim, eps);
    for (int64_t i = 0; i < dim; ++i) {
      y[r * dim + i] = static_cast<T>(static_cast<double>(x[r * dim + i]) * s * w[i]);
    }
  }
}

template <class T>
void rms_norm_backward(int64_t rows, int64_t dim, const T* x, int64_t ldx, const T* w, const T* dy,
                       int64_t lddy, double eps, T* dx, int64_t lddx, T* dw, TaskRunner& runner) {
  util::parallel_for(runner, rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * ldx;
      const T* g = dy + r * lddy;
      const double s = inv_rms(dim, xr, eps);
      double dot = 0;
      for (int64_t i = 0; i < dim; ++i) dot += static_cast<double>(w[i]) * g[i] * xr[i];
      const double c = dot * s * s * s / static_cast<double>(dim);
      T* d = dx + r * lddx;
      for (int64_t i = 0; i < dim; ++i) {
        d[i] = static_cast<T>(s * static_cast<double>(w[i]) * g[i] - c * xr[i]);
      }
    }
  });
  if (dw == nullptr) return;
  for (int64_t i = 0; i < dim; ++i) dw[i] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double s = inv_rms(dim, x + r * ldx, eps);
    for (int64_t i = 0; i < dim; ++i) {
      dw[i] += static_cast<T>(static_cast<double>(dy[r * lddy + i]) * x[r * ldx + i] * s);
    }
  }
}

#define SAMPAN_INSTANTIATE(T)                                                                 \
  template void rms_norm_ref<T>(int64_t, int64_t, const T*, const T*, double, T*);            \
  template void rms_norm_backward<T>(int64_t, int64_t, const T*, int64_t, const T*, const T*, \
                                     int64_t, double, T*, int64_t, T*, TaskRunner&);
SAMPAN_INSTANTIATE(float)
SAMPAN_INSTANTIATE(double)
#undef SAMPAN_INSTANTIATE

}  // namespace sampan::cpu
