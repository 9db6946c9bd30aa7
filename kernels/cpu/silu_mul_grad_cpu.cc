#include "kernels/cpu/silu_mul_grad_cpu.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/row_kernels.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {

template <class T>
void silu_mul_ref(int64_t rows, int64_t n, const T* g, const T* u, T* y) {
  for (int64_t i = 0; i < rows * n; ++i) {
    const double x = g[i];
    y[i] = static_cast<T>(x / (1.0 + std::exp(-x)) * u[i]);
  }
}

template <class T>
void silu_mul_backward(int64_t rows, int64_t n, const T* g, int64_t ldg, const T* u, int64_t ldu,
                       const T* dy, int64_t lddy, T* dg, int64_t lddg, T* du, int64_t lddu,
                       TaskRunner& runner) {
  if constexpr (std::is_same_v<T, float>) {
    // The graph op: the vector rows (row_kernels.h). Measured, bf16 LoRA training on the
    // TinyLlama shape, 2 threads: the double loop below took 3.4 % of a step.
    const auto kernel =
        has_avx512() ? detail::silu_mul_grad_rows_avx512 : detail::silu_mul_grad_rows_avx2;
    util::parallel_for(runner, rows, 4, [&](int64_t r0, int64_t r1) {
      kernel(r1 - r0, n, g + r0 * ldg, ldg, u + r0 * ldu, ldu, dy + r0 * lddy, lddy,
             dg + r0 * lddg, lddg, du + r0 * lddu, lddu);
    });
    return;
  }
  util::parallel_for(runner, rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        const double x = g[r * ldg + i], up = u[r * ldu + i], d = dy[r * lddy + i];
        const double s = 1.0 / (1.0 + std::exp(-x));
        dg[r * lddg + i] = static_cast<T>(d * up * s * (1.0 + x * (1.0 - s)));
        du[r * lddu + i] = static_cast<T>(d * x * s);
      }
    }
  });
}

#define SAMPAN_INSTANTIATE(T)                                                                \
  template void silu_mul_ref<T>(int64_t, int64_t, const T*, const T*, T*);                   \
  template void silu_mul_backward<T>(int64_t, int64_t, const T*, int64_t, const T*, int64_t, \
                                     const T*, int64_t, T*, int64_t, T*, int64_t, TaskRunner&);
SAMPAN_INSTANTIATE(float)
SAMPAN_INSTANTIATE(double)
#undef SAMPAN_INSTANTIATE

}  // namespace sampan::cpu
