// The inner loop of CPU attention: one query token, the query heads that share one KV head, and
// a range of key positions of its sequence, read through the sequence's block table. Written
// once over a SIMD traits type (vec_avx2.h / vec_avx512.h) and instantiated in attention_cpu.cc
// and attention_avx512.cc; attention_cpu.cc owns the work split, the threads and the merge of
// split ranges.
//
// Keys are taken in blocks of kKeyBlock positions. Per block:
//  - the block's K and V rows of this KV head are gathered into contiguous scratch, one run of
//    rows per physical cache block it touches, so nothing after the copy depends on the cache's
//    block size. In the cache the rows are n_kv_heads * head_dim floats apart, often a power of
//    two (1 KB, 4 KB), which maps a block onto a handful of L1 sets where it would evict itself
//    before the next head reads it; packed, it stays in L1 for all heads of the group. The copy
//    is also a plain streaming read, the pattern the memory system serves best.
//  - the scores of every head: kWidth keys at a time, each key's products summed in its own
//    vector, then one transpose_sum for kWidth scores (instead of one reduction per score).
//  - the online-softmax update in f32: block maximum, vector exp, and a rescale of the running
//    sums only when the maximum grew.
//  - the V rows weighted into the accumulators, several heads per pass (vector registers).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace sampan::cpu::detail {

struct AttentionRange {
  const float* q = nullptr;  // [group, head_dim]: the group's query heads, contiguous
  // Row r of physical block b of this KV head is at k + (b * block_size + r) * ld_kv (the pool
  // base already offset to the head); position j of the sequence is in block
  // blocks[j / block_size], row j % block_size.
  const float* k = nullptr;
  const float* v = nullptr;  // same for V
  int64_t ld_kv = 0;
  const int32_t* blocks = nullptr;  // the sequence's block table row
  int64_t block_size = 0;
  int64_t group = 0;  // query heads per KV head
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t first = 0;  // positions [first, last] are attended; first <= last
  int64_t last = -1;
  float* scratch = nullptr;  // attention_scratch_floats(group, head_dim) floats
  // out: [group, head_dim]. With m == nullptr it receives the normalised result. Otherwise it
  // receives the unnormalised sum of e^(s - m) v, with m: [group] the running maxima and
  // l: [group] the sums of e^(s - m), so that split ranges can be merged.
  float* out = nullptr;
  float* m = nullptr;
  float* l = nullptr;
  // Formats other than kF32 (kv_quant_impl.h) read k_rows / v_rows instead of k / v: the
  // pool's bytes offset to this head's record, rows ld_bytes apart.
  KvDtype dtype = KvDtype::kF32;
  const uint8_t* k_rows = nullptr;
  const uint8_t* v_rows = nullptr;
  int64_t ld_bytes = 0;
};

// 32 rows keep a packed K and V block of head_dim 128 (2 x 16 KB) inside a 48 KB L1.
constexpr int64_t kKeyBlock = 32;

inline int64_t attention_scratch_floats(int64_t group, int64_t head_dim) {
  return group * head_dim + group * kKeyBlock + 2 * group + 2 * kKeyBlock * head_dim;
}

void attention_range_avx2(const AttentionRange& a);
void attention_range_avx512(const AttentionRange& a);

}  // namespace sampan::cpu::detail

namespace sampan::cpu {
namespace {

template <class S>
inline float dot1(const float* q, const float* k, int64_t hd) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  V a = S::zero();
  int64_t d = 0;
  for (; d + kW <= hd; d += kW) a = S::fma(S::load(q + d), S::load(k + d), a);
  if (d < hd) {
    const int n = static_cast<int>(hd - d);
    a = S::fma(S::load_n(q + d, n), S::load_n(k + d, n), a);
  }
  return S::reduce_add(a);
}

// sc[g kKeyBlock + j] = q_g . k_j for every head g < group and key j < nb, with q_g = q + g hd
// and k_j = k + j hd (a packed block). For each run of kWidth keys and each head, every key sums
// its products in its own vector (kWidth independent FMA chains, four q vectors held), and one
// transpose_sum gives the kWidth scores. The run's kWidth K rows are reused from L1 by all heads.
// kHd > 0 fixes head_dim at compile time, so that all offsets become constants.
template <class S, int kHd>
inline void group_scores(const float* q, int64_t group, const float* k, int64_t nb, int64_t hd_rt,
                         float* sc) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  constexpr int kQ = 4;
  constexpr int64_t kB = detail::kKeyBlock;
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  int64_t j0 = 0;
  for (; j0 + kW <= nb; j0 += kW) {
    const float* kb = k + j0 * hd;
    for (int64_t g = 0; g < group; ++g) {
      const float* qg = q + g * hd;
      V acc[kW];
#pragma GCC unroll 16
      for (int j = 0; j < kW; ++j) acc[j] = S::zero();
      int64_t d = 0;
      for (; d + kQ * kW <= hd; d += kQ * kW) {
        V qv[kQ];
#pragma GCC unroll 4
        for (int c = 0; c < kQ; ++c) qv[c] = S::load(qg + d + c * kW);
#pragma GCC unroll 16
        for (int j = 0; j < kW; ++j) {
#pragma GCC unroll 4
          for (int c = 0; c < kQ; ++c) {
            acc[j] = S::fma(qv[c], S::load(kb + j * hd + d + c * kW), acc[j]);
          }
        }
      }
      for (; d < hd; d += kW) {
        const int n = hd - d < kW ? static_cast<int>(hd - d) : kW;
        const V qv = S::load_n(qg + d, n);
#pragma GCC unroll 16
        for (int j = 0; j < kW; ++j) acc[j] = S::fma(qv, S::load_n(kb + j * hd + d, n), acc[j]);
      }
      S::store(sc + g * kB + j0, S::transpose_sum(acc));
    }
  }
  for (; j0 < nb; ++j0) {
    for (int64_t g = 0; g < group; ++g) sc[g * kB + j0] = dot1<S>(q + g * hd, k + j0 * hd, hd);
  }
}

// dst[j] = src + j ld, hd floats each, for j < n.
template <class S, int kHd>
inline void pack_rows(const float* src, int64_t ld, int64_t n, int64_t hd_rt, float* dst) {
  constexpr int kW = S::kWidth;
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  for (int64_t j = 0; j < n; ++j, src += ld, dst += hd) {
    int64_t d = 0;
    for (; d + kW <= hd; d += kW) S::store(dst + d, S::load(src + d));
    if (d < hd) {
      S::store_n(dst + d, S::load_n(src + d, static_cast<int>(hd - d)), static_cast<int>(hd - d));
    }
  }
}

// dst[i] = the row of sequence position j0 + i, hd floats each, for i < n: one pack_rows per run
// of positions inside one physical block.
template <class S, int kHd>
inline void gather_rows(const float* base, int64_t ld, const int32_t* blocks, int64_t bs,
                        int64_t j0, int64_t n, int64_t hd_rt, float* dst) {
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  while (n > 0) {
    const int64_t r = j0 % bs;
    const int64_t run = bs - r < n ? bs - r : n;
    pack_rows<S, kHd>(base + (static_cast<int64_t>(blocks[j0 / bs]) * bs + r) * ld, ld, run, hd,
                      dst);
    dst += run * hd;
    j0 += run;
    n -= run;
  }
}

// s[0, nb) = e^(s - m) in place; returns their sum.
template <class S>
inline float exp_shift_sum(float* s, int64_t nb, float m) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const V mv = S::set1(m);
  V sum = S::zero();
  int64_t j = 0;
  for (; j + kW <= nb; j += kW) {
    const V p = S::exp(S::sub(S::load(s + j), mv));
    S::store(s + j, p);
    sum = S::add(sum, p);
  }
  if (j < nb) {
    const int n = static_cast<int>(nb - j);
    // Lanes past n load 0 and give e^-m; they are masked out of the store but would enter the
    // sum, so the sum takes only the stored part (reloaded).
    const V p = S::exp(S::sub(S::load_n(s + j, n), mv));
    S::store_n(s + j, p, n);
    sum = S::add(sum, S::load_n(s + j, n));
  }
  return S::reduce_add(sum);
}

template <class S>
inline float max_of(const float* s, int64_t nb) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  float m = -INFINITY;
  int64_t j = 0;
  if (nb >= kW) {
    V mv = S::load(s);
    for (j = kW; j + kW <= nb; j += kW) mv = S::max(mv, S::load(s + j));
    m = S::reduce_max(mv);
  }
  for (; j < nb; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

template <class S>
inline void scale_in_place(float* x, int64_t n, float f) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const V fv = S::set1(f);
  int64_t d = 0;
  for (; d + kW <= n; d += kW) S::store(x + d, S::mul(S::load(x + d), fv));
  if (d < n) {
    S::store_n(x + d, S::mul(S::load_n(x + d, static_cast<int>(n - d)), fv),
               static_cast<int>(n - d));
  }
}

// The online-softmax step of one key block: sc [group, kKeyBlock] scores (nb valid) become
// e^(s - m) with m the updated running maxima mx [group]; the running sums sum [group] and the
// accumulators acc [group, hd] are rescaled when a maximum grew.
template <class S>
inline void softmax_block(float* sc, int64_t group, int64_t nb, int64_t hd, float* mx, float* sum,
                          float* acc) {
  constexpr int64_t kB = detail::kKeyBlock;
  for (int64_t g = 0; g < group; ++g) {
    float* sg = sc + g * kB;
    const float bm = max_of<S>(sg, nb);
    const float m_new = bm > mx[g] ? bm : mx[g];
    // All scores -inf (only with infinite inputs): nothing to add, and e^(-inf - -inf) would
    // be NaN.
    if (m_new == -INFINITY) {
      for (int64_t j = 0; j < nb; ++j) sg[j] = 0.0f;
      continue;
    }
    if (m_new != mx[g]) {
      const float corr = std::exp(mx[g] - m_new);  // 0 on the first block
      sum[g] *= corr;
      scale_in_place<S>(acc + g * hd, hd, corr);
      mx[g] = m_new;
    }
    sum[g] += exp_shift_sum<S>(sg, nb, m_new);
  }
}

// Normalises a.out, or hands the running maxima and sums over for a merge.
template <class S>
inline void finish_range(const detail::AttentionRange& a, const float* mx, const float* sum) {
  const int64_t hd = a.head_dim;
  if (a.m == nullptr) {
    for (int64_t g = 0; g < a.group; ++g) {
      scale_in_place<S>(a.out + g * hd, hd, sum[g] > 0.0f ? 1.0f / sum[g] : 0.0f);
    }
  } else {
    for (int64_t g = 0; g < a.group; ++g) {
      a.m[g] = mx[g];
      a.l[g] = sum[g];
    }
  }
}

// For kH heads at once: acc_h[0, hd) += sum_j p_h[j] v_j, with acc_h = acc + h hd,
// p_h = p + h kKeyBlock and v_j = v + j ld for j < nb. A chunk of a V row is loaded once for
// the kH heads, and the kH * 4 accumulators stay in registers for the whole block. They are also
// independent FMA chains: four alone would wait on the FMA latency, so a single head takes even
// and odd keys into two sets of accumulators instead.
template <class S, int kH>
inline void accumulate_v(float* acc, int64_t hd, const float* p, const float* v, int64_t ld,
                         int64_t nb) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  constexpr int64_t kB = detail::kKeyBlock;
  constexpr int kSets = kH == 1 ? 2 : kH;  // accumulator sets: one per head, or even/odd keys
  int64_t d = 0;
  for (; d + 4 * kW <= hd; d += 4 * kW) {
    V a[kSets][4];
#pragma GCC unroll 16
    for (int h = 0; h < kSets; ++h) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        a[h][u] = h < kH ? S::load(acc + h * hd + d + u * kW) : S::zero();
      }
    }
    const float* vr = v + d;
    int64_t j = 0;
    if constexpr (kH == 1) {
      for (; j + 2 <= nb; j += 2, vr += 2 * ld) {
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
          const V pj = S::set1(p[j + e]);
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) a[e][u] = S::fma(pj, S::load(vr + e * ld + u * kW), a[e][u]);
        }
      }
    }
    for (; j < nb; ++j, vr += ld) {
      V vv[4];
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) vv[u] = S::load(vr + u * kW);
#pragma GCC unroll 16
      for (int h = 0; h < kH; ++h) {
        const V ph = S::set1(p[h * kB + j]);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) a[h][u] = S::fma(ph, vv[u], a[h][u]);
      }
    }
    if constexpr (kH == 1) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) a[0][u] = S::add(a[0][u], a[1][u]);
    }
#pragma GCC unroll 16
    for (int h = 0; h < kH; ++h) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) S::store(acc + h * hd + d + u * kW, a[h][u]);
    }
  }
  for (; d < hd; d += kW) {
    const int n = hd - d < kW ? static_cast<int>(hd - d) : kW;
    V a[kH];
#pragma GCC unroll 16
    for (int h = 0; h < kH; ++h) a[h] = S::load_n(acc + h * hd + d, n);
    const float* vr = v + d;
    for (int64_t j = 0; j < nb; ++j, vr += ld) {
      const V vv = S::load_n(vr, n);
#pragma GCC unroll 16
      for (int h = 0; h < kH; ++h) a[h] = S::fma(S::set1(p[h * kB + j]), vv, a[h]);
    }
#pragma GCC unroll 16
    for (int h = 0; h < kH; ++h) S::store_n(acc + h * hd + d, a[h], n);
  }
}

template <class S, int kHd>
void attention_range(const detail::AttentionRange& a) {
  const int64_t hd = kHd > 0 ? kHd : a.head_dim;
  const int64_t group = a.group, ld = a.ld_kv;
  constexpr int64_t kB = detail::kKeyBlock;
  float* qs = a.scratch;        // [group, hd] q * scale
  float* sc = qs + group * hd;  // [group, kB] scores, then probabilities
  float* mx = sc + group * kB;  // [group] running maxima
  float* sum = mx + group;      // [group] running sums
  float* kp = sum + group;      // [kB, hd] packed K block
  float* vp = kp + kB * hd;     // [kB, hd] packed V block
  float* acc = a.out;           // [group, hd]
  // q is copied (scaled) before acc is zeroed, so out may even overlap q.
  for (int64_t i = 0; i < group * hd; ++i) qs[i] = a.q[i] * a.scale;
  for (int64_t i = 0; i < group * hd; ++i) acc[i] = 0.0f;
  for (int64_t g = 0; g < group; ++g) {
    mx[g] = -INFINITY;
    sum[g] = 0.0f;
  }
  for (int64_t j0 = a.first; j0 <= a.last; j0 += kB) {
    const int64_t nb = a.last - j0 + 1 < kB ? a.last - j0 + 1 : kB;
    gather_rows<S, kHd>(a.k, ld, a.blocks, a.block_size, j0, nb, hd, kp);
    gather_rows<S, kHd>(a.v, ld, a.blocks, a.block_size, j0, nb, hd, vp);
    group_scores<S, kHd>(qs, group, kp, nb, hd, sc);
    softmax_block<S>(sc, group, nb, hd, mx, sum, acc);
    // Heads per pass: the accumulators must fit the register file (16 ymm or 32 zmm).
    constexpr int kVHeads = S::kWidth == 16 ? 4 : 2;
    int64_t g = 0;
    for (; g + kVHeads <= group; g += kVHeads) {
      accumulate_v<S, kVHeads>(acc + g * hd, hd, sc + g * kB, vp, hd, nb);
    }
    if constexpr (kVHeads > 2) {
      for (; g + 2 <= group; g += 2) accumulate_v<S, 2>(acc + g * hd, hd, sc + g * kB, vp, hd, nb);
    }
    for (; g < group; ++g) accumulate_v<S, 1>(acc + g * hd, hd, sc + g * kB, vp, hd, nb);
  }
  finish_range<S>(a, mx, sum);
}

// The common head sizes get their own instantiation (constant offsets, full unrolling).
template <class S>
void attention_range_dispatch(const detail::AttentionRange& a) {
  switch (a.head_dim) {
    case 64:
      return attention_range<S, 64>(a);
    case 128:
      return attention_range<S, 128>(a);
    default:
      return attention_range<S, 0>(a);
  }
}

}  // namespace
}  // namespace sampan::cpu
