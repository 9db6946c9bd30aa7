// The GEMM form of causal_attention_cpu.h's f32 kernels (the templates there are the spec).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/causal_attention_cpu.h"
#include "kernels/cpu/gemm_cpu.h"

namespace sampan::cpu {
namespace {

GemmWeights dense(const float* data, int64_t rows, int64_t k) {
  GemmWeights w;
  w.dtype = DType::kF32;
  w.k = k;
  w.n_blocks = 1;
  w.data[0] = data;
  w.rows[0] = rows;
  return w;
}

// y[m, n] = x[m, k] · w[n, k]ᵀ on the calling thread (tasks already run in parallel).
void mm(int64_t m, const float* x, int64_t ldx, const float* w, int64_t n, int64_t k, float* y,
        int64_t ldy) {
  SerialRunner serial;
  gemm(m, x, ldx, dense(w, n, k), GemmEpilogue::kStore, y, ldy, serial);
}

// dst[c, r] = src[r, c]: src [rows, cols] row stride lds, dst [cols, rows] contiguous.
void transpose(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * lds + c];
  }
}

// dst [rows, cols] contiguous from src with row stride lds.
void pack(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * lds, src + r * lds + cols, dst + r * cols);
}

int64_t first_key(const CausalAttentionDims& d, int64_t t) {
  return d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
}

}  // namespace

void causal_attention_forward_f32(const CausalAttentionDims& d, const float* q, int64_t ldq,
                                  const float* k, int64_t ldk, const float* v, int64_t ldv,
                                  const int32_t* lengths, float* o, int64_t ldo, float* lse,
                                  TaskRunner& runner) {
  const int64_t D = d.head_dim, H = d.n_heads, T = d.seq_len, group = d.n_heads / d.n_kv_heads;
  runner.run(d.batch * H, [&](int64_t task) {
    const int64_t b = task / H, h = task % H, g = h / group;
    const int64_t L = lengths[b];
    for (int64_t t = L; t < T; ++t) {
      std::fill(o + (b * T + t) * ldo + h * D, o + (b * T + t) * ldo + (h + 1) * D, 0.0f);
      lse[(b * T + t) * H + h] = 0.0f;
    }
    if (L == 0) return;
    std::vector<float> kp(static_cast<size_t>(L * D)), vt(static_cast<size_t>(D * L));
    std::vector<float> s(static_cast<size_t>(L * L));
    pack(L, D, k + b * T * ldk + g * D, ldk, kp.data());
    transpose(L, D, v + b * T * ldv + g * D, ldv, vt.data());
    mm(L, q + b * T * ldq + h * D, ldq, kp.data(), L, D, s.data(), L);
    for (int64_t t = 0; t < L; ++t) {
      float* row = s.data() + t * L;
      const int64_t lo = first_key(d, t);
      double m = -INFINITY;
      for (int64_t j = lo; j <= t; ++j) m = std::max(m, d.scale * row[j]);
      double z = 0;
      for (int64_t j = lo; j <= t; ++j) z += std::exp(d.scale * row[j] - m);
      const double l = m + std::log(z);
      for (int64_t j = 0; j < L; ++j) {
        row[j] = j >= lo && j <= t ? static_cast<float>(std::exp(d.scale * row[j] - l)) : 0.0f;
      }
      lse[(b * T + t) * H + h] = static_cast<float>(l);
    }
    mm(L, s.data(), L, vt.data(), D, L, o + b * T * ldo + h * D, ldo);
  });
}

void causal_attention_backward_f32(const CausalAttentionDims& d, const float* q, int64_t ldq,
                                   const float* k, int64_t ldk, const float* v, int64_t ldv,
                                   const int32_t* lengths, const float* o, int64_t ldo,
                                   const float* lse, const float* dout, int64_t lddo, float* dq,
                                   int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                                   TaskRunner& runner) {
  const int64_t D = d.head_dim, H = d.n_heads, Hkv = d.n_kv_heads, T = d.seq_len;
  const int64_t group = H / Hkv;
  runner.run(d.batch * Hkv, [&](int64_t task) {
    const int64_t b = task / Hkv, g = task % Hkv;
    const int64_t L = lengths[b];
    for (int64_t t = L; t < T; ++t) {
      const int64_t row = b * T + t;
      std::fill(dk + row * lddk + g * D, dk + row * lddk + (g + 1) * D, 0.0f);
      std::fill(dv + row * lddv + g * D, dv + row * lddv + (g + 1) * D, 0.0f);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        std::fill(dq + row * lddq + h * D, dq + row * lddq + (h + 1) * D, 0.0f);
      }
    }
    if (L == 0) return;
    const size_t LL = static_cast<size_t>(L * L), LD = static_cast<size_t>(L * D);
    std::vector<float> kp(LD), vp(LD), kt(LD), qt(LD), dot_(LD), tmp(LD);
    std::vector<float> gk(LD, 0.0f), gv(LD, 0.0f);
    std::vector<float> p(LL), dp(LL), pt(LL), dst(LL);
    pack(L, D, k + b * T * ldk + g * D, ldk, kp.data());
    pack(L, D, v + b * T * ldv + g * D, ldv, vp.data());
    transpose(L, D, k + b * T * ldk + g * D, ldk, kt.data());
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const float* qh = q + b * T * ldq + h * D;
      const float* doh = dout + b * T * lddo + h * D;
      const float* oh = o + b * T * ldo + h * D;
      mm(L, qh, ldq, kp.data(), L, D, p.data(), L);     // scores
      mm(L, doh, lddo, vp.data(), L, D, dp.data(), L);  // dP = dO · Vᵀ
      for (int64_t t = 0; t < L; ++t) {
        const int64_t lo = first_key(d, t);
        const double l = lse[(b * T + t) * H + h];
        double di = 0;
        for (int64_t c = 0; c < D; ++c) {
          di += static_cast<double>(doh[t * lddo + c]) * oh[t * ldo + c];
        }
        float* pr = p.data() + t * L;
        float* dr = dp.data() + t * L;
        for (int64_t j = 0; j < L; ++j) {
          if (j < lo || j > t) {
            pr[j] = 0.0f;
            dr[j] = 0.0f;
            continue;
          }
          const double pj = std::exp(d.scale * pr[j] - l);
          pr[j] = static_cast<float>(pj);
          dr[j] = static_cast<float>(pj * (dr[j] - di) * d.scale);  // now dS (scaled)
        }
      }
      mm(L, dp.data(), L, kt.data(), D, L, dq + b * T * lddq + h * D, lddq);  // dQ = dS · K
      transpose(L, L, dp.data(), L, dst.data());
      transpose(L, L, p.data(), L, pt.data());
      transpose(L, D, qh, ldq, qt.data());
      transpose(L, D, doh, lddo, dot_.data());
      mm(L, dst.data(), L, qt.data(), D, L, tmp.data(), D);  // dK += dSᵀ · Q
      for (size_t i = 0; i < LD; ++i) gk[i] += tmp[i];
      mm(L, pt.data(), L, dot_.data(), D, L, tmp.data(), D);  // dV += Pᵀ · dO
      for (size_t i = 0; i < LD; ++i) gv[i] += tmp[i];
    }
    for (int64_t t = 0; t < L; ++t) {
      std::copy(gk.data() + t * D, gk.data() + (t + 1) * D, dk + (b * T + t) * lddk + g * D);
      std::copy(gv.data() + t * D, gv.data() + (t + 1) * D, dv + (b * T + t) * lddv + g * D);
    }
  });
}

}  // namespace sampan::cpu
