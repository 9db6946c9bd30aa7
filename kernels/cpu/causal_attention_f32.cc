// The GEMM form of causal_attention_cpu.h's f32 kernels (the templates there are the spec).
// The softmax steps run 8 lanes at a time on avx2_math.h's exp (the CPU baseline), f32 with the
// row sums finished in double: they were scalar double std::exp calls, ~12 % of a bf16 LoRA
// training step on the TinyLlama shape (perf).
//
// Causal blocks: queries go in blocks of kBlock rows, and each product takes only the keys the
// block can see (from its first row's first key, past 0 under a sliding window, to its last
// row), so the masked upper triangle is never multiplied: at L = 256, 62.5 % of the full
// products. The f32 kernels work one block at a time (flash-attention style): its scores, P and
// dS are [kBlock, keys] and dK, dV sum the blocks' dSᵀ·Q, Pᵀ·dO into [L, D], so a task's scratch
// is O(L (D + kBlock)) floats, where it held [L, L] matrices (several: ~18 L² bytes per worker,
// 300 MB at L = 4096) and transposed them whole. Measured (`sampan finetune --profile`, the small
// bench model, 1 thread, 3 steps, old / new library): at --seq-len 2048 the attention backward
// 21.5 -> 5.4 s and the forward 4.6 -> 3.2 s; at 256 the same within noise (0.38 / 0.36 s). The
// other operand of each product is transposed per block where the GEMM needs it contiguous (gemm
// reads weight rows of exactly k elements). The bf16 kernels below still take the [L, L] form.
//
// bf16_products (bf16 training): the same blocks with every product on matmul_bf16_a16 (AMX
// tiles or vdpbf16ps), its operands rounded to bf16 once per task: Q, Qᵀ, dO, dOᵀ per head, K,
// Kᵀ, Vᵀ per (sequence, kv head) in the backward (Q, Kᵀ, V per head in the forward), P and dS
// per head as the softmax steps leave them. The backward takes dKᵀ = Qᵀ·dS and dVᵀ = dOᵀ·P,
// so P and dS are read as they lie and only the [D, L] operands and results are transposed.
// Measured stand-alone on one core of an AMX CPU at the per-head shapes (64 rows; 64..256 keys
// or dims): 1.7-2.9x the f32 GEMM.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/causal_attention_cpu.h"
#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"
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

// dst [rows, cols] bf16 (row stride ldd) from src [rows, cols] f32 (row stride lds), rounded to
// nearest even.
void to_bf16(int64_t rows, int64_t cols, const float* src, int64_t lds, uint16_t* dst,
             int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) convert_f32_to_bf16(src + r * lds, dst + r * ldd, cols);
}

// dst [cols, rows] bf16 (dense) = bf16(src)ᵀ for src [rows, cols] f32 (row stride lds), through
// scratch [cols, rows] f32.
void transposed_bf16(int64_t rows, int64_t cols, const float* src, int64_t lds, float* scratch,
                     uint16_t* dst) {
  transpose(rows, cols, src, lds, scratch);
  to_bf16(cols, rows, scratch, rows, dst, rows);
}

// y[m, n] (row stride ldy) = a[m, k] (bf16, lda) · b[k, n] (bf16, ldb) on the calling thread.
void mm16(int64_t m, int64_t k, int64_t n, const uint16_t* a, int64_t lda, const uint16_t* b,
          int64_t ldb, float* y, int64_t ldy) {
  SerialRunner serial;
  matmul_bf16_a16(m, k, n, a, lda, b, ldb, y, ldy, serial);
}

bool bf16_fast(const CausalAttentionDims& d) {
  return d.bf16_products && conv_bf16_native() && (has_amx() || bf16_panels_preferred());
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

// Zeroes what the forward leaves for padding rows t >= L of sequence b, head h.
void zero_padding_forward(const CausalAttentionDims& d, int64_t b, int64_t h, int64_t L, float* o,
                          int64_t ldo, float* lse) {
  const int64_t D = d.head_dim, H = d.n_heads, T = d.seq_len;
  for (int64_t t = L; t < T; ++t) {
    std::fill(o + (b * T + t) * ldo + h * D, o + (b * T + t) * ldo + (h + 1) * D, 0.0f);
    lse[(b * T + t) * H + h] = 0.0f;
  }
}

// Zeroes the gradients of padding rows t >= L of sequence b for kv head g and its query heads.
void zero_padding_backward(const CausalAttentionDims& d, int64_t b, int64_t g, int64_t L,
                           float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv,
                           int64_t lddv) {
  const int64_t D = d.head_dim, T = d.seq_len, group = d.n_heads / d.n_kv_heads;
  for (int64_t t = L; t < T; ++t) {
    const int64_t row = b * T + t;
    std::fill(dk + row * lddk + g * D, dk + row * lddk + (g + 1) * D, 0.0f);
    std::fill(dv + row * lddv + g * D, dv + row * lddv + (g + 1) * D, 0.0f);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      std::fill(dq + row * lddq + h * D, dq + row * lddq + (h + 1) * D, 0.0f);
    }
  }
}

// The keys a block of query rows [r0, r1) sees: [k0, r1), k0 the first row's first key (every
// later row's is at or after it).
struct KeyRange {
  int64_t r1, k0, nk;
};

KeyRange block_keys(const CausalAttentionDims& d, int64_t L, int64_t r0) {
  const int64_t r1 = std::min(L, r0 + kBlock), k0 = first_key(d, r0);
  return {r1, k0, r1 - k0};
}

// Every key of a sequence of L rows (the bf16 kernels' [L, L] rows).
KeyRange all_keys(int64_t L) { return {L, 0, L}; }

// Row t of a block's scores (s [nk], keys k.k0 .. k.r1 - 1) -> its probabilities, zeros for the
// keys it does not see; returns the row's log-sum-exp.
double softmax_block_row(const CausalAttentionDims& d, float* s, const KeyRange& k, int64_t t) {
  const int64_t lo = first_key(d, t) - k.k0, n = t - first_key(d, t) + 1;
  const double l = softmax_row(s + lo, n, static_cast<float>(d.scale));
  std::fill(s, s + lo, 0.0f);
  std::fill(s + lo + n, s + k.nk, 0.0f);
  return l;
}

// Row t of a block: p [nk] (raw scores) becomes P and dp [nk] (dO·Vᵀ) dS (scaled), both zero
// for the keys it does not see; lse the row's log-sum-exp, di = rowsum(dO * O).
void softmax_grad_block_row(const CausalAttentionDims& d, float* p, float* dp, const KeyRange& k,
                            int64_t t, float lse, double di) {
  const int64_t lo = first_key(d, t) - k.k0, n = t - first_key(d, t) + 1;
  softmax_grad_row(p + lo, dp + lo, n, static_cast<float>(d.scale), lse, static_cast<float>(di));
  std::fill(p, p + lo, 0.0f);
  std::fill(dp, dp + lo, 0.0f);
  std::fill(p + lo + n, p + k.nk, 0.0f);
  std::fill(dp + lo + n, dp + k.nk, 0.0f);
}

// acc[i] += src[i], i < n.
void add_rows(const float* src, int64_t n, float* acc) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_loadu_ps(src + i)));
  }
  for (; i < n; ++i) acc[i] += src[i];
}

// dst = bf16(src) for src [L, L] f32 (row stride L), only where a product reads it: rows of
// block [r0, r1) up to column r1 (the keys the block sees; the rest is zero and never read).
void causal_to_bf16(int64_t L, const float* src, uint16_t* dst) {
  for (int64_t r0 = 0; r0 < L; r0 += kBlock) {
    const int64_t r1 = std::min(L, r0 + kBlock);
    to_bf16(r1 - r0, r1, src + r0 * L, L, dst + r0 * L, L);
  }
}

void forward_bf16(const CausalAttentionDims& d, const float* q, int64_t ldq, const float* k,
                  int64_t ldk, const float* v, int64_t ldv, const int32_t* lengths, float* o,
                  int64_t ldo, float* lse, TaskRunner& runner) {
  const int64_t D = d.head_dim, H = d.n_heads, T = d.seq_len, group = d.n_heads / d.n_kv_heads;
  runner.run(d.batch * H, [&](int64_t task) {
    const int64_t b = task / H, h = task % H, g = h / group;
    const int64_t L = lengths[b];
    zero_padding_forward(d, b, h, L, o, ldo, lse);
    if (L == 0) return;
    const size_t LD = static_cast<size_t>(L * D), LL = static_cast<size_t>(L * L);
    std::vector<float> kt(LD), s(LL);
    std::vector<uint16_t> q16(LD), kt16(LD), v16(LD), p16(LL);
    to_bf16(L, D, q + b * T * ldq + h * D, ldq, q16.data(), D);
    transposed_bf16(L, D, k + b * T * ldk + g * D, ldk, kt.data(), kt16.data());  // Kᵀ [D, L]
    to_bf16(L, D, v + b * T * ldv + g * D, ldv, v16.data(), D);
    for (int64_t r0 = 0; r0 < L; r0 += kBlock) {  // scores of the keys each block sees
      const int64_t r1 = std::min(L, r0 + kBlock);
      mm16(r1 - r0, D, r1, q16.data() + r0 * D, D, kt16.data(), L, s.data() + r0 * L, L);
    }
    for (int64_t t = 0; t < L; ++t) {
      lse[(b * T + t) * H + h] =
          static_cast<float>(softmax_block_row(d, s.data() + t * L, all_keys(L), t));
    }
    causal_to_bf16(L, s.data(), p16.data());
    for (int64_t r0 = 0; r0 < L; r0 += kBlock) {  // O = P V over the keys each block sees
      const int64_t r1 = std::min(L, r0 + kBlock);
      mm16(r1 - r0, r1, D, p16.data() + r0 * L, L, v16.data(), D,
           o + (b * T + r0) * ldo + h * D, ldo);
    }
  });
}

void backward_bf16(const CausalAttentionDims& d, const float* q, int64_t ldq, const float* k,
                   int64_t ldk, const float* v, int64_t ldv, const int32_t* lengths,
                   const float* o, int64_t ldo, const float* lse, const float* dout, int64_t lddo,
                   float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                   TaskRunner& runner) {
  const int64_t D = d.head_dim, H = d.n_heads, Hkv = d.n_kv_heads, T = d.seq_len;
  const int64_t group = H / Hkv;
  runner.run(d.batch * Hkv, [&](int64_t task) {
    const int64_t b = task / Hkv, g = task % Hkv;
    const int64_t L = lengths[b];
    zero_padding_backward(d, b, g, L, dq, lddq, dk, lddk, dv, lddv);
    if (L == 0) return;
    const size_t LL = static_cast<size_t>(L * L), LD = static_cast<size_t>(L * D);
    std::vector<float> t32(LD), tmp(LD), tmp2(LD), gkt(LD, 0.0f), gvt(LD, 0.0f);
    std::vector<float> p(LL), dp(LL);
    std::vector<uint16_t> k16(LD), kt16(LD), vt16(LD), q16(LD), do16(LD), qt16(LD), dot16(LD);
    std::vector<uint16_t> ds16(LL), p16(LL);
    const float* kg = k + b * T * ldk + g * D;
    const float* vg = v + b * T * ldv + g * D;
    to_bf16(L, D, kg, ldk, k16.data(), D);
    transposed_bf16(L, D, kg, ldk, t32.data(), kt16.data());  // Kᵀ [D, L]
    transposed_bf16(L, D, vg, ldv, t32.data(), vt16.data());  // Vᵀ [D, L]
    const int64_t n_blocks = (L + kBlock - 1) / kBlock;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const float* qh = q + b * T * ldq + h * D;
      const float* doh = dout + b * T * lddo + h * D;
      const float* oh = o + b * T * ldo + h * D;
      to_bf16(L, D, qh, ldq, q16.data(), D);
      to_bf16(L, D, doh, lddo, do16.data(), D);
      for (int64_t r0 = 0; r0 < L; r0 += kBlock) {  // the keys each block of rows sees
        const int64_t r1 = std::min(L, r0 + kBlock);
        mm16(r1 - r0, D, r1, q16.data() + r0 * D, D, kt16.data(), L, p.data() + r0 * L, L);
        mm16(r1 - r0, D, r1, do16.data() + r0 * D, D, vt16.data(), L, dp.data() + r0 * L, L);
      }
      for (int64_t t = 0; t < L; ++t) {
        softmax_grad_block_row(d, p.data() + t * L, dp.data() + t * L, all_keys(L), t,
                               lse[(b * T + t) * H + h],
                               dot_double(doh + t * lddo, oh + t * ldo, D));
      }
      causal_to_bf16(L, dp.data(), ds16.data());
      for (int64_t bi = 0; bi < n_blocks; ++bi) {  // dQ = dS · K
        const int64_t r0 = bi * kBlock, r1 = std::min(L, r0 + kBlock);
        mm16(r1 - r0, r1, D, ds16.data() + r0 * L, L, k16.data(), D,
             dq + (b * T + r0) * lddq + h * D, lddq);
      }
      // dKᵀ = Qᵀ · dS and dVᵀ = dOᵀ · P: dS and P as they lie, Q and dO transposed ([D, L],
      // a quarter of an [L, L] transpose at D = 64, L = 256).
      causal_to_bf16(L, p.data(), p16.data());
      transposed_bf16(L, D, qh, ldq, t32.data(), qt16.data());
      transposed_bf16(L, D, doh, lddo, t32.data(), dot16.data());
      for (int64_t c0 = 0; c0 < L; c0 += kBlock) {  // key block c0..c1: the queries from c0 on
        const int64_t c1 = std::min(L, c0 + kBlock), n_q = L - c0;
        mm16(D, n_q, c1 - c0, qt16.data() + c0, L, ds16.data() + c0 * L + c0, L, tmp.data() + c0,
             L);
        mm16(D, n_q, c1 - c0, dot16.data() + c0, L, p16.data() + c0 * L + c0, L,
             tmp2.data() + c0, L);
      }
      for (size_t i = 0; i < LD; ++i) gkt[i] += tmp[i];  // dKᵀ, [D, L]
      for (size_t i = 0; i < LD; ++i) gvt[i] += tmp2[i];  // dVᵀ
    }
    transpose_f32(D, L, gkt.data(), L, dk + b * T * lddk + g * D, lddk);
    transpose_f32(D, L, gvt.data(), L, dv + b * T * lddv + g * D, lddv);
  });
}

}  // namespace

void causal_attention_forward_f32(const CausalAttentionDims& d, const float* q, int64_t ldq,
                                  const float* k, int64_t ldk, const float* v, int64_t ldv,
                                  const int32_t* lengths, float* o, int64_t ldo, float* lse,
                                  TaskRunner& runner) {
  if (bf16_fast(d)) {
    forward_bf16(d, q, ldq, k, ldk, v, ldv, lengths, o, ldo, lse, runner);
    return;
  }
  const int64_t D = d.head_dim, H = d.n_heads, T = d.seq_len, group = d.n_heads / d.n_kv_heads;
  runner.run(d.batch * H, [&](int64_t task) {
    const int64_t b = task / H, h = task % H, g = h / group;
    const int64_t L = lengths[b];
    zero_padding_forward(d, b, h, L, o, ldo, lse);
    if (L == 0) return;
    const int64_t cap = std::min(L, kBlock);  // rows of a block
    std::vector<float> kp(static_cast<size_t>(L * D)), vt(static_cast<size_t>(D * L));
    std::vector<float> s(static_cast<size_t>(cap * L));  // one block's scores, [rows, nk]
    pack(L, D, k + b * T * ldk + g * D, ldk, kp.data());
    for (int64_t r0 = 0; r0 < L; r0 += kBlock) {
      const KeyRange kr = block_keys(d, L, r0);
      const int64_t rows = kr.r1 - r0;
      // Scores of the keys the block sees, then each row's probabilities.
      mm(rows, q + (b * T + r0) * ldq + h * D, ldq, kp.data() + kr.k0 * D, kr.nk, D, s.data(),
         kr.nk);
      for (int64_t t = r0; t < kr.r1; ++t) {
        lse[(b * T + t) * H + h] =
            static_cast<float>(softmax_block_row(d, s.data() + (t - r0) * kr.nk, kr, t));
      }
      // O = P V over those keys: Vᵀ of them as the GEMM's [D, nk] weight rows.
      transpose(kr.nk, D, v + (b * T + kr.k0) * ldv + g * D, ldv, vt.data());
      mm(rows, s.data(), kr.nk, vt.data(), D, kr.nk, o + (b * T + r0) * ldo + h * D, ldo);
    }
  });
}

void causal_attention_backward_f32(const CausalAttentionDims& d, const float* q, int64_t ldq,
                                   const float* k, int64_t ldk, const float* v, int64_t ldv,
                                   const int32_t* lengths, const float* o, int64_t ldo,
                                   const float* lse, const float* dout, int64_t lddo, float* dq,
                                   int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                                   TaskRunner& runner) {
  if (bf16_fast(d)) {
    backward_bf16(d, q, ldq, k, ldk, v, ldv, lengths, o, ldo, lse, dout, lddo, dq, lddq, dk, lddk,
                  dv, lddv, runner);
    return;
  }
  const int64_t D = d.head_dim, H = d.n_heads, Hkv = d.n_kv_heads, T = d.seq_len;
  const int64_t group = H / Hkv;
  runner.run(d.batch * Hkv, [&](int64_t task) {
    const int64_t b = task / Hkv, g = task % Hkv;
    const int64_t L = lengths[b];
    zero_padding_backward(d, b, g, L, dq, lddq, dk, lddk, dv, lddv);
    if (L == 0) return;
    const int64_t cap = std::min(L, kBlock);
    const size_t LD = static_cast<size_t>(L * D), BL = static_cast<size_t>(cap * L);
    const size_t BD = static_cast<size_t>(cap * D);
    std::vector<float> kp(LD), vp(LD), kt(LD), gk(LD, 0.0f), gv(LD, 0.0f), tmp(LD);
    std::vector<float> p(BL), dp(BL), pt(BL), dst(BL), qt(BD), dot_(BD);
    const float* kg = k + b * T * ldk + g * D;
    pack(L, D, kg, ldk, kp.data());
    pack(L, D, v + b * T * ldv + g * D, ldv, vp.data());
    for (int64_t r0 = 0; r0 < L; r0 += kBlock) {
      const KeyRange kr = block_keys(d, L, r0);
      const int64_t rows = kr.r1 - r0, nk = kr.nk;
      transpose(nk, D, kg + kr.k0 * ldk, ldk, kt.data());  // Kᵀ of the block's keys, [D, nk]
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* qh = q + (b * T + r0) * ldq + h * D;     // the block's rows
        const float* doh = dout + (b * T + r0) * lddo + h * D;
        const float* oh = o + (b * T + r0) * ldo + h * D;
        mm(rows, qh, ldq, kp.data() + kr.k0 * D, nk, D, p.data(), nk);      // scores
        mm(rows, doh, lddo, vp.data() + kr.k0 * D, nk, D, dp.data(), nk);  // dO · Vᵀ
        for (int64_t t = r0; t < kr.r1; ++t) {
          const int64_t i = t - r0;
          softmax_grad_block_row(d, p.data() + i * nk, dp.data() + i * nk, kr, t,
                                 lse[(b * T + t) * H + h],
                                 dot_double(doh + i * lddo, oh + i * ldo, D));
        }
        // dQ = dS · K (every row of the block is done here).
        mm(rows, dp.data(), nk, kt.data(), D, nk, dq + (b * T + r0) * lddq + h * D, lddq);
        // dK += dSᵀ · Q and dV += Pᵀ · dO over the block's keys: dSᵀ and Pᵀ [nk, rows] times
        // Qᵀ and dOᵀ [D, rows] as weight rows.
        transpose(rows, nk, dp.data(), nk, dst.data());
        transpose(rows, nk, p.data(), nk, pt.data());
        transpose(rows, D, qh, ldq, qt.data());
        transpose(rows, D, doh, lddo, dot_.data());
        mm(nk, dst.data(), rows, qt.data(), D, rows, tmp.data(), D);
        add_rows(tmp.data(), nk * D, gk.data() + kr.k0 * D);
        mm(nk, pt.data(), rows, dot_.data(), D, rows, tmp.data(), D);
        add_rows(tmp.data(), nk * D, gv.data() + kr.k0 * D);
      }
    }
    for (int64_t t = 0; t < L; ++t) {
      std::copy(gk.data() + t * D, gk.data() + (t + 1) * D, dk + (b * T + t) * lddk + g * D);
      std::copy(gv.data() + t * D, gv.data() + (t + 1) * D, dv + (b * T + t) * lddv + g * D);
    }
  });
}

}  // namespace sampan::cpu
