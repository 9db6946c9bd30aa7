#include "kernels/cpu/rope_grad_cpu.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

// sign +1: the forward rotation, -1: its transpose.
template <class T>
void rotate(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* x, int64_t ldx,
            const int32_t* pos, const float* inv_freq, double f, double sign, T* y, int64_t ldy,
            TaskRunner& runner) {
  const int64_t half = head_dim / 2;
  util::parallel_for(runner, n_tokens, 4, [&](int64_t t0, int64_t t1) {
    std::vector<double> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      const float p = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(p * inv_freq[i]);
        c[static_cast<size_t>(i)] = std::cos(a) * f;
        s[static_cast<size_t>(i)] = sign * std::sin(a) * f;
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        const T* xh = x + t * ldx + h * head_dim;
        T* yh = y + t * ldy + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const double a = xh[i], b = xh[i + half];
          const double ci = c[static_cast<size_t>(i)], si = s[static_cast<size_t>(i)];
          yh[i] = static_cast<T>(a * ci - b * si);
          yh[i + half] = static_cast<T>(b * ci + a * si);
        }
      }
    }
  });
}

}  // namespace

template <class T>
void rope_ref(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* x, const int32_t* pos,
              const float* inv_freq, double attn_factor, T* y) {
  SerialRunner serial;
  const int64_t w = n_heads * head_dim;
  rotate(n_tokens, n_heads, head_dim, x, w, pos, inv_freq, attn_factor, 1.0, y, w, serial);
}

template <class T>
void rope_backward(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* dy, int64_t lddy,
                   const int32_t* pos, const float* inv_freq, double attn_factor, T* dx,
                   int64_t lddx, TaskRunner& runner) {
  rotate(n_tokens, n_heads, head_dim, dy, lddy, pos, inv_freq, attn_factor, -1.0, dx, lddx, runner);
}

#define SAMPAN_INSTANTIATE(T)                                                                  \
  template void rope_ref<T>(int64_t, int64_t, int64_t, const T*, const int32_t*, const float*, \
                            double, T*);                                                       \
  template void rope_backward<T>(int64_t, int64_t, int64_t, const T*, int64_t, const int32_t*, \
                                 const float*, double, T*, int64_t, TaskRunner&);
SAMPAN_INSTANTIATE(float)
SAMPAN_INSTANTIATE(double)
#undef SAMPAN_INSTANTIATE

}  // namespace sampan::cpu
