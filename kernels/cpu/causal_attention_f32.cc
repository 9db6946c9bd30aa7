// The GEMM form of causal_attention_cpu.h's f32 kernels (the templates there are the spec).
// The softmax steps run 8 lanes at a time on avx2_math.h's exp (the CPU baseline), f32 with the
// row sums finished in double: they were scalar double std::exp calls, ~12 % of a bf16 LoRA
// training step on the TinyLlama shape (perf).
//
// Causal blocks: queries go in blocks of kBlock rows, and each product takes only the keys the
// block can see (those below its last row: the scores, dP and the products with them), or for
// dK and dV the queries that can see a key block (from its first row on), so the masked upper
// triangle is never multiplied: at L = 256, 62.5 % of the full products. Their other operand is
// transposed per block where the GEMM needs it contiguous (gemm reads weight rows of exactly k
// elements).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/causal_attention_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/transpose_f32_avx2.h"
#include "kernels/cpu/vec_avx2.h"

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
  transpose_f32(rows, cols, src, lds, dst, rows);
}

// dst [rows, cols] contiguous from src with row stride lds.
void pack(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * lds, src + r * lds + cols, dst + r * cols);
}

// Query rows per causal block.
constexpr int64_t kBlock = 64;

int64_t first_key(const CausalAttentionDims& d, int64_t t) {
  return d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
}

// Lanes a step of 8 covers when `left` elements remain.
int lane_count(int64_t left) { return static_cast<int>(std::min<int64_t>(left, 8)); }

double hsum(__m256 v) {
  alignas(32) float f[8];
  _mm256_store_ps(f, v);
  double s = 0;
  for (float x : f) s += x;
  return s;
}

// Σ a[c] b[c] over c < n in double, 4 lanes (the scalar chain of double FMAs, 4 cycles each,
// was a quarter of the backward's own time outside its GEMMs).
double dot_double(const float* a, const float* b, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    acc0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + c)),
                           _mm256_cvtps_pd(_mm_loadu_ps(b + c)), acc0);
    acc1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + c + 4)),
                           _mm256_cvtps_pd(_mm_loadu_ps(b + c + 4)), acc1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; c < n; ++c) s += static_cast<double>(a[c]) * b[c];
  return s;
}

// One forward row: s [n] raw scores (keys lo..t) -> e^(scale s - lse) in place; returns lse.
// max and sum over the row as the spec takes them (the sum's 8 lane partials added in double).
double softmax_row(float* s, int64_t n, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  __m256 vm = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 8) {
    const __m256i mk = Avx2::lane_mask(lane_count(n - j));
    const __m256 x = _mm256_mul_ps(_mm256_maskload_ps(s + j, mk), vs);
    vm = _mm256_max_ps(vm, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x, _mm256_castsi256_ps(mk)));
  }
  const float m = Avx2::reduce_max(vm);
  const __m256 vmax = _mm256_set1_ps(m);
  __m256 vz = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    const __m256i mk = Avx2::lane_mask(lane_count(n - j));
    const __m256 e = avx2_math::exp8(_mm256_fmsub_ps(_mm256_maskload_ps(s + j, mk), vs, vmax));
    vz = _mm256_add_ps(vz, _mm256_and_ps(e, _mm256_castsi256_ps(mk)));
  }
  const double lse = static_cast<double>(m) + std::log(hsum(vz));
  const __m256 vl = _mm256_set1_ps(static_cast<float>(lse));
  for (int64_t j = 0; j < n; j += 8) {
    const int k = lane_count(n - j);
    Avx2::store_n(s + j, avx2_math::exp8(_mm256_fmsub_ps(Avx2::load_n(s + j, k), vs, vl)), k);
  }
  return lse;
}

// One backward row over keys lo..t: p [n] raw scores -> P = e^(scale p - lse), dp [n] dO·Vᵀ ->
// dS = P (dp - di) scale, both in place.
void softmax_grad_row(float* p, float* dp, int64_t n, float scale, float lse, float di) {
  const __m256 vs = _mm256_set1_ps(scale), vl = _mm256_set1_ps(lse), vd = _mm256_set1_ps(di);
  for (int64_t j = 0; j < n; j += 8) {
    const int k = lane_count(n - j);
    const __m256 pj = avx2_math::exp8(_mm256_fmsub_ps(Avx2::load_n(p + j, k), vs, vl));
    const __m256 ds = _mm256_mul_ps(_mm256_mul_ps(pj, _mm256_sub_ps(Avx2::load_n(dp + j, k), vd)), vs);
    Avx2::store_n(p + j, pj, k);
    Avx2::store_n(dp + j, ds, k);
  }
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
    for (int64_t r0 = 0; r0 < L; r0 += kBlock) {  // scores of the keys each block sees
      const int64_t r1 = std::min(L, r0 + kBlock);
      mm(r1 - r0, q + (b * T + r0) * ldq + h * D, ldq, kp.data(), r1, D, s.data() + r0 * L, L);
    }
    const float scale = static_cast<float>(d.scale);
    for (int64_t t = 0; t < L; ++t) {
      float* row = s.data() + t * L;
      const int64_t lo = first_key(d, t);
      const double l = softmax_row(row + lo, t - lo + 1, scale);
      std::fill(row, row + lo, 0.0f);
      std::fill(row + t + 1, row + L, 0.0f);
      lse[(b * T + t) * H + h] = static_cast<float>(l);
    }
    for (int64_t r0 = 0; r0 < L; r0 += kBlock) {  // O = P V over the keys each block sees
      const int64_t r1 = std::min(L, r0 + kBlock);
      transpose(r1, D, v + b * T * ldv + g * D, ldv, vt.data());  // [D, r1]
      mm(r1 - r0, s.data() + r0 * L, L, vt.data(), D, r1, o + (b * T + r0) * ldo + h * D, ldo);
    }
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
    std::vector<float> kp(LD), vp(LD), qt(LD), dot_(LD), tmp(LD), tmp2(LD);
    std::vector<float> gk(LD, 0.0f), gv(LD, 0.0f);
    std::vector<float> p(LL), dp(LL), pt(LL), dst(LL);
    pack(L, D, k + b * T * ldk + g * D, ldk, kp.data());
    pack(L, D, v + b * T * ldv + g * D, ldv, vp.data());
    // Kᵀ of the keys below each block's end, [D, r1] each, for dQ (shared by the group's heads).
    const int64_t n_blocks = (L + kBlock - 1) / kBlock;
    std::vector<std::vector<float>> kt_prefix(static_cast<size_t>(n_blocks));
    for (int64_t bi = 0; bi < n_blocks; ++bi) {
      const int64_t r1 = std::min(L, (bi + 1) * kBlock);
      kt_prefix[static_cast<size_t>(bi)].resize(static_cast<size_t>(r1 * D));
      transpose(r1, D, k + b * T * ldk + g * D, ldk, kt_prefix[static_cast<size_t>(bi)].data());
    }
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const float* qh = q + b * T * ldq + h * D;
      const float* doh = dout + b * T * lddo + h * D;
      const float* oh = o + b * T * ldo + h * D;
      for (int64_t r0 = 0; r0 < L; r0 += kBlock) {  // the keys each block of rows sees
        const int64_t r1 = std::min(L, r0 + kBlock);
        mm(r1 - r0, qh + r0 * ldq, ldq, kp.data(), r1, D, p.data() + r0 * L, L);     // scores
        mm(r1 - r0, doh + r0 * lddo, lddo, vp.data(), r1, D, dp.data() + r0 * L, L);  // dO · Vᵀ
      }
      for (int64_t t = 0; t < L; ++t) {
        const int64_t lo = first_key(d, t);
        const double l = lse[(b * T + t) * H + h];
        const double di = dot_double(doh + t * lddo, oh + t * ldo, D);
        float* pr = p.data() + t * L;
        float* dr = dp.data() + t * L;
        // pr becomes P, dr dS (scaled); zero outside the row's keys.
        softmax_grad_row(pr + lo, dr + lo, t - lo + 1, static_cast<float>(d.scale),
                         static_cast<float>(l), static_cast<float>(di));
        std::fill(pr, pr + lo, 0.0f);
        std::fill(dr, dr + lo, 0.0f);
        std::fill(pr + t + 1, pr + L, 0.0f);
        std::fill(dr + t + 1, dr + L, 0.0f);
      }
      for (int64_t bi = 0; bi < n_blocks; ++bi) {  // dQ = dS · K
        const int64_t r0 = bi * kBlock, r1 = std::min(L, r0 + kBlock);
        mm(r1 - r0, dp.data() + r0 * L, L, kt_prefix[static_cast<size_t>(bi)].data(), D, r1,
           dq + (b * T + r0) * lddq + h * D, lddq);
      }
      transpose(L, L, dp.data(), L, dst.data());
      transpose(L, L, p.data(), L, pt.data());
      for (int64_t c0 = 0; c0 < L; c0 += kBlock) {  // key block c0..c1: the queries from c0 on
        const int64_t c1 = std::min(L, c0 + kBlock), n_q = L - c0;
        transpose(n_q, D, qh + c0 * ldq, ldq, qt.data());      // [D, n_q]
        transpose(n_q, D, doh + c0 * lddo, lddo, dot_.data());  // [D, n_q]
        mm(c1 - c0, dst.data() + c0 * L + c0, L, qt.data(), D, n_q, tmp.data() + c0 * D, D);
        mm(c1 - c0, pt.data() + c0 * L + c0, L, dot_.data(), D, n_q, tmp2.data() + c0 * D, D);
      }
      for (size_t i = 0; i < LD; ++i) gk[i] += tmp[i];  // dK += dSᵀ · Q
      for (size_t i = 0; i < LD; ++i) gv[i] += tmp2[i];  // dV += Pᵀ · dO
    }
    for (int64_t t = 0; t < L; ++t) {
      std::copy(gk.data() + t * D, gk.data() + (t + 1) * D, dk + (b * T + t) * lddk + g * D);
      std::copy(gv.data() + t * D, gv.data() + (t + 1) * D, dv + (b * T + t) * lddv + g * D);
    }
  });
}

}  // namespace sampan::cpu
