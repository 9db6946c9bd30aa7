#include "kernels/cpu/causal_attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sampan::cpu {
namespace {

template <class T>
double dot(int64_t n, const T* a, const T* b) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

int64_t first_key(const CausalAttentionDims& d, int64_t t) {
  return d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
}

}  // namespace

template <class T>
void causal_attention_forward(const CausalAttentionDims& d, const T* q, int64_t ldq, const T* k,
                              int64_t ldk, const T* v, int64_t ldv, const int32_t* lengths, T* o,
                              int64_t ldo, T* lse, TaskRunner& runner) {
  const int64_t D = d.head_dim, H = d.n_heads, group = d.n_heads / d.n_kv_heads;
  runner.run(d.batch * H, [&](int64_t task) {
    const int64_t b = task / H, h = task % H, g = h / group;
    const int64_t len = lengths[b];
    std::vector<double> p(static_cast<size_t>(d.seq_len));
    std::vector<double> acc(static_cast<size_t>(D));
    for (int64_t t = 0; t < d.seq_len; ++t) {
      const int64_t row = b * d.seq_len + t;
      T* orow = o + row * ldo + h * D;
      if (t >= len) {
        std::fill(orow, orow + D, T(0));
        lse[row * H + h] = T(0);
        continue;
      }
      const T* qr = q + row * ldq + h * D;
      const int64_t lo = first_key(d, t);
      double m = -INFINITY;
      for (int64_t j = lo; j <= t; ++j) {
        const double s = d.scale * dot(D, qr, k + (b * d.seq_len + j) * ldk + g * D);
        p[static_cast<size_t>(j)] = s;
        m = std::max(m, s);
      }
      double z = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = lo; j <= t; ++j) {
        const double e = std::exp(p[static_cast<size_t>(j)] - m);
        z += e;
        const T* vr = v + (b * d.seq_len + j) * ldv + g * D;
        for (int64_t c = 0; c < D; ++c) acc[static_cast<size_t>(c)] += e * vr[c];
      }
      for (int64_t c = 0; c < D; ++c) orow[c] = static_cast<T>(acc[static_cast<size_t>(c)] / z);
      lse[row * H + h] = static_cast<T>(m + std::log(z));
    }
  });
}

template <class T>
void causal_attention_backward(const CausalAttentionDims& d, const T* q, int64_t ldq, const T* k,
                               int64_t ldk, const T* v, int64_t ldv, const int32_t* lengths,
                               const T* o, int64_t ldo, const T* lse, const T* dout, int64_t lddo,
                               T* dq, int64_t lddq, T* dk, int64_t lddk, T* dv, int64_t lddv,
                               TaskRunner& runner) {
  const int64_t D = d.head_dim, H = d.n_heads, Hkv = d.n_kv_heads, group = H / Hkv;
  const int64_t Tn = d.seq_len;
  runner.run(d.batch * Hkv, [&](int64_t task) {
    const int64_t b = task / Hkv, g = task % Hkv;
    const int64_t len = lengths[b];
    // This task's dk / dv columns, accumulated in double.
    std::vector<double> gk(static_cast<size_t>(Tn * D), 0.0), gv(static_cast<size_t>(Tn * D), 0.0);
    std::vector<double> ds(static_cast<size_t>(Tn)), gq(static_cast<size_t>(D));
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t row = b * Tn + t;
        T* dqr = dq + row * lddq + h * D;
        if (t >= len) {
          std::fill(dqr, dqr + D, T(0));
          continue;
        }
        const T* qr = q + row * ldq + h * D;
        const T* dor = dout + row * lddo + h * D;
        const double di = dot(D, dor, o + row * ldo + h * D);
        const double l = lse[row * H + h];
        const int64_t lo = first_key(d, t);
        std::fill(gq.begin(), gq.end(), 0.0);
        for (int64_t j = lo; j <= t; ++j) {
          const T* kr = k + (b * Tn + j) * ldk + g * D;
          const T* vr = v + (b * Tn + j) * ldv + g * D;
          const double pj = std::exp(d.scale * dot(D, qr, kr) - l);
          const double s = pj * (dot(D, dor, vr) - di) * d.scale;
          double* gkj = gk.data() + j * D;
          double* gvj = gv.data() + j * D;
          for (int64_t c = 0; c < D; ++c) {
            gq[static_cast<size_t>(c)] += s * kr[c];
            gkj[c] += s * qr[c];
            gvj[c] += pj * dor[c];
          }
        }
        for (int64_t c = 0; c < D; ++c) dqr[c] = static_cast<T>(gq[static_cast<size_t>(c)]);
      }
    }
    for (int64_t t = 0; t < Tn; ++t) {
      T* dkr = dk + (b * Tn + t) * lddk + g * D;
      T* dvr = dv + (b * Tn + t) * lddv + g * D;
      for (int64_t c = 0; c < D; ++c) {
        dkr[c] = static_cast<T>(gk[static_cast<size_t>(t * D + c)]);
        dvr[c] = static_cast<T>(gv[static_cast<size_t>(t * D + c)]);
      }
    }
  });
}

#define SAMPAN_INSTANTIATE(T)                                                                      \
  template void causal_attention_forward<T>(const CausalAttentionDims&, const T*, int64_t,         \
                                            const T*, int64_t, const T*, int64_t, const int32_t*,  \
                                            T*, int64_t, T*, TaskRunner&);                         \
  template void causal_attention_backward<T>(const CausalAttentionDims&, const T*, int64_t,        \
                                             const T*, int64_t, const T*, int64_t, const int32_t*, \
                                             const T*, int64_t, const T*, const T*, int64_t, T*,   \
                                             int64_t, T*, int64_t, T*, int64_t, TaskRunner&);
SAMPAN_INSTANTIATE(float)
SAMPAN_INSTANTIATE(double)
#undef SAMPAN_INSTANTIATE

}  // namespace sampan::cpu
