// The f32 attention loop: the range contract of attention_impl.h for an f32 cache, one KV head
// per range (n_kv = 1). Written once over a SIMD traits type and instantiated through
// attention_range_any (kv_quant_impl.h).
//
// Unlike the other formats (kv_quant_impl.h, read in place), each key block's K and V rows of
// the KV head are first gathered into contiguous scratch, one run of rows per physical cache
// block: the copy is a plain streaming read whose loads all go out at once, and from memory it
// beat reading the rows in place (`sampan bench --profile`, int4 weights, 1900 cached f32
// tokens, 2 threads: attention 6.8-7.5 ms per token gathered, 8.6-9.3 ms in place, with one or
// all KV heads per range) although in place was faster on a cache held in L3 (bench_attention
// without --cold). In the cache the rows are n_kv_heads * head_dim floats apart, often a power
// of two (1 KB, 4 KB), which maps a block onto a handful of L1 sets where it would evict itself
// before the next head reads it; packed, it stays in L1 for all heads of the group.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_impl.h"

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
  const int64_t group = a.group, ld = a.ld_bytes / static_cast<int64_t>(sizeof(float));
  const float* k = reinterpret_cast<const float*>(a.k_rows);
  const float* v = reinterpret_cast<const float*>(a.v_rows);
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
    gather_rows<S, kHd>(k, ld, a.blocks, a.block_size, j0, nb, hd, kp);
    gather_rows<S, kHd>(v, ld, a.blocks, a.block_size, j0, nb, hd, vp);
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
