// Decode attention at the avx2 level with the query heads in the lanes: the loop for 3..8 query
// heads per KV head (8: TinyLlama, Qwen2.5-3B / 72B, Llama-3-70B; 7: Qwen2.5-0.5B / 7B; 6:
// Qwen2.5-1.5B; 4: Llama-3-8B, Llama-3.2-1B, Mistral-7B), groups of 5-7 padded to 8 lanes-heads
// and of 3 to 4 (q 0 in the spare lanes, whose results are dropped), over every cache format
// the FMA loop serves: f32, bf16 and fp8, and int8 / int4 where the integer loop
// (attention_int_avx2.cc, faster for them) does not take the range (GemmPrecision::kF32, a q
// holding an inf or NaN). Other groups (1, 2, 9 and more) and odd head sizes at groups of 3-4
// run the loop of kv_quant_impl.h. Included by attention_cpu.cc only (AVX2 flags).
//
// Why: kv_quant_impl.h's loop sums each (head, key) score in its own vector and folds 8 of them
// per 8 scores (transpose_sum: 21 shuffles and adds), runs the online softmax head by head
// (horizontal maxima and sums, scalar steps), and reads its q operands 4 heads at a time, so a
// Zen 3 core ran about one FMA per cycle there (an isolated copy of its score loop 1.3, of its V
// loop 1.75, of the two FMA ports' 2). Here q of a KV head is stored transposed, q^T [hd / P, 8]
// with P = 8 / G dims per lane group (lane P h + p holds q_h[P i + p] at row i), and the scores
// of key j are one vector: sum over i of broadcast(k_j[P i .. P i + P)) * q^T[i], 8 keys at a
// time (8 independent chains; one q^T load and 8 broadcast loads, no shuffles, per 8 FMAs; an
// isolated copy 1.5 FMAs per cycle). For G = 4 the 2 partial sums of a head are added by one
// vhaddps per 2 keys, and a vpermps puts key j's 4 heads together. The scores then lie key by
// key with the heads in the lanes: the online softmax runs on all heads at once (vertical maxima
// and sums; one exp per 8 / G keys), and the V loop (accumulate_v_q) reads head h's weight of
// key j at st[G j + h]. A compressed block's K records are converted to f32 (times their row
// scales) once per KV head first; V is read as the other loop reads it.
//
// Measured (Zen 3 VM, bench_attention --formats-only, old and new library alternating, medians
// of 4-8 rounds, ms per call; this host's wall times vary by 1.5x between minutes, so 1-thread
// process CPU time where marked): TinyLlama heads (group 8, head size 64), wall, f32 decode of
// 4096 keys 0.881 / 0.573 -> 0.696 / 0.422 (1 / 2 threads), of 512 keys 0.112 -> 0.088, a batch
// of 64 x 256 4.42 -> 4.20; CPU time, 4096 keys f32 0.901 -> 0.716, bf16 0.732 -> 0.619, fp8
// 0.927 -> 0.794 (64 x 256: 4.51 -> 4.21, 3.25 -> 2.83, 3.99 -> 3.41), int8 / int4 at kF32
// 0.789 / 1.005 -> 0.668 / 0.860. Qwen2.5-7B heads (group 7, 128), wall, f32 4096 keys 1.69 /
// 0.89 -> 1.40 / 0.73, bf16 1.51 / 0.88 -> 1.33 / 0.70. Llama-3-8B heads (group 4, 128; 32 MB
// of f32 cache at 4096 keys, from memory) f32 2.75 / 1.53 -> 2.41 / 1.20, bf16 1.70 -> 1.68.
//
// Accuracy: the contract of attention_cpu.h. Each score sums its products in i order within a
// lane (then the G = 4 pair by one addition), the other loop in 8 partial sums, and a row-scaled
// K element is multiplied by its scale before the products, not the score after: different
// last bits, the same bound (test_paged_attention, test_kv_quant against double references).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/kv_quant_impl.h"
#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu {
namespace {

// Whether attention_range_lanes_avx2 takes the range: groups of 5-8 (padded to 8 lanes-heads),
// and of 3-4 with an even head size (the lane pairs of q^T), in any format (the caller has handed
// int4 / int8 ranges to the integer loop where it takes them).
inline bool attention_lanes_takes(const detail::AttentionRange& a) {
  return (a.group >= 5 && a.group <= 8) || (a.group >= 3 && a.group <= 4 && a.head_dim % 2 == 0);
}

// Key j's G scores: s[i] (8 lanes, P = 8 / G partial sums per head) summed over P, at st[G j].
// G = 8 stores each vector; G = 4 adds the lane pairs of two keys in one vhaddps, whose lanes
// (j h0, j h1, j+1 h0, j+1 h1 | j h2, j h3, j+1 h2, j+1 h3) one vpermps puts in key order.
template <int kG>
inline void store_scores(const __m256* s, int n, float* st) {
  if constexpr (kG == 8) {
    for (int i = 0; i < n; ++i) _mm256_storeu_ps(st + 8 * i, s[i]);
  } else {
    static_assert(kG == 4);
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    int i = 0;
    for (; i + 2 <= n; i += 2) {
      _mm256_storeu_ps(st + 4 * i,
                       _mm256_permutevar8x32_ps(_mm256_hadd_ps(s[i], s[i + 1]), order));
    }
    if (i < n) {  // one key: its 4 heads in lanes 0..3
      const __m256 t = _mm256_permutevar8x32_ps(_mm256_hadd_ps(s[i], s[i]), order);
      _mm_storeu_ps(st + 4 * i, _mm256_castps256_ps128(t));
    }
  }
}

// The G-lane vector of per-head values at p (G floats, the last G - group of them read but
// unused: scratch that follows), repeated over the 8 lanes; stored back, the group's lanes only.
template <int kG>
inline __m256 load_heads(const float* p) {
  if constexpr (kG == 8) return _mm256_loadu_ps(p);
  return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p));
}
template <int kG>
inline void store_heads(float* p, __m256 v, int group) {
  const __m256i mask = Avx2::lane_mask(group);
  if constexpr (kG == 8) {
    _mm256_maskstore_ps(p, mask, v);
  } else {
    _mm_maskstore_ps(p, _mm256_castsi256_si128(mask), _mm256_castps256_ps128(v));
  }
}
// Lane l of the result combines every lane holding the same head as l (G = 4: l and l ^ 4).
template <int kG>
inline __m256 fold_max(__m256 v) {
  if constexpr (kG == 8) return v;
  return _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
}
template <int kG>
inline __m256 fold_add(__m256 v) {
  if constexpr (kG == 8) return v;
  return _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 1));
}

// Row r of q^T's partner in key record k (f32): k[r] in every lane (G = 8), or k[2r], k[2r + 1]
// repeated (G = 4).
template <int kG>
inline __m256 broadcast_k(const float* k, int64_t r) {
  if constexpr (kG == 8) return _mm256_broadcast_ss(k + r);
  return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(k + 2 * r)));
}

// A compressed block's K records of one KV head as f32 rows of kc ([nb, hd]), times their row
// scales (kI8, kF8E4M3): the scores' broadcasts then read f32 (a bf16 or fp8 broadcast would
// need conversions per FMA), and each element is converted once, where the other loop converts
// each K vector once per 4 heads.
template <KvDtype D>
inline void records_to_f32(const uint8_t* const* kb, int64_t off, int64_t nb, int64_t hd,
                           float* kc) {
  using L = KvLoad<Avx2, D>;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* r = kb[i] + off;
    const __m256 rs = _mm256_set1_ps(L::row_scale(r, hd));
    float* dst = kc + i * hd;
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      const __m256 v = L::load(r, d, hd);
      _mm256_storeu_ps(dst + d, L::kRowScale ? _mm256_mul_ps(v, rs) : v);
    }
    if (d < hd) {
      const int n = static_cast<int>(hd - d);
      const __m256 v = L::tail(r, d, hd);
      Avx2::store_n(dst + d, L::kRowScale ? _mm256_mul_ps(v, rs) : v, n);
    }
  }
}

template <KvDtype D, int kG, int kHd>
void attention_range_lanes(const detail::AttentionRange& a) {
  using S = Avx2;
  constexpr int kP = 8 / kG;  // dims per lane group
  constexpr int64_t kB = detail::kKeyBlock;
  const int64_t hd = kHd > 0 ? kHd : a.head_dim;
  const int64_t rows_t = hd / kP;  // rows of q^T
  const int group = static_cast<int>(a.group);  // G or fewer: the other lanes' q is 0
  const int64_t n_kv = a.n_kv, heads = n_kv * group;
  const int64_t head_bytes = kv_head_bytes(D, hd);
  float* qt = a.scratch;              // [n_kv, rows_t, 8]: q * scale, transposed per KV head
  float* mx = qt + n_kv * kG * hd;    // [n_kv, group] running maxima
  float* sum = mx + heads;            // [n_kv, group] running sums
  float* st = sum + heads;            // [kB, G]: one KV head's scores, then weights, key by key
  float* kc = st + kB * kG;           // (not f32) [kB, hd]: the block's K records as f32
  const uint8_t* kb[kB];
  const uint8_t* vb[kB];
  const uint8_t* vr[kB];
  const uint8_t* next_rows[2 * kB];
  // The next block's rows into L2 (start), and for f32 this KV head's V records into L1 while
  // its scores are computed (start_near, as kv_quant_impl.h does for f32): measured (medians of
  // 4-5 alternating rounds, 1 thread) one 4096-key sequence, TinyLlama 0.655 / 0.686 ms without /
  // with the L1 requests, Llama-3-8B heads (4 KB rows, 32 MB of cache: from memory) 3.13 / 2.62;
  // also the next KV head's K records, 0.718 / 2.66. The other formats go without them (their
  // K records are read by the conversion; bf16 0.647 without, 0.676 with).
  SpreadPrefetch<true> pf;
  // q is copied (scaled) before out is zeroed, so out may even overlap q.
  for (int64_t h = 0; h < n_kv; ++h) {
    for (int64_t g = 0; g < kG; ++g) {
      const float* qg = a.q + (h * group + g) * hd;
      float* t = qt + h * hd * kG + kP * g;
      for (int64_t d = 0; d < hd; ++d) t[(d / kP) * 8 + d % kP] = g < group ? qg[d] * a.scale : 0;
    }
  }
  start_range(a, hd, mx, sum);
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int64_t j0 = a.first; j0 <= a.last; j0 += kB) {
    const int64_t nb = a.last - j0 + 1 < kB ? a.last - j0 + 1 : kB;
    key_block_rows(a, j0, nb, kb, vb);
    const int64_t nbn = next_block_rows(a, j0, next_rows);
    pf.start(next_rows, 2 * nbn, n_kv * head_bytes, n_kv * 2 * nb);
    for (int64_t h = 0; h < n_kv; ++h) {
      float* acc = a.out + h * group * hd;  // [group, hd]
      const float* qh = qt + h * hd * kG;
      const int64_t off = h * head_bytes;
      for (int64_t i = 0; i < nb; ++i) vr[i] = vb[i] + off;
      if constexpr (D == KvDtype::kF32) pf.start_near(vr, nb, head_bytes, nb);
      if constexpr (D != KvDtype::kF32) records_to_f32<D>(kb, off, nb, hd, kc);
      // Key j's K record as f32.
      auto k_f32 = [&](int64_t j) {
        if constexpr (D != KvDtype::kF32) return static_cast<const float*>(kc + j * hd);
        return reinterpret_cast<const float*>(kb[j] + off);
      };
      // Scores: 8 keys at a time, then the block's last keys one by one.
      int64_t j = 0;
      for (; j + 8 <= nb; j += 8) {
        const float* kr[8];
        __m256 t[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          pf.step();
          kr[i] = k_f32(j + i);
          t[i] = _mm256_setzero_ps();
        }
#pragma GCC unroll 4
        for (int64_t r = 0; r < rows_t; ++r) {
          const __m256 qv = _mm256_loadu_ps(qh + 8 * r);
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) t[i] = _mm256_fmadd_ps(broadcast_k<kG>(kr[i], r), qv, t[i]);
        }
        store_scores<kG>(t, 8, st + kG * j);
      }
      for (; j < nb; ++j) {
        pf.step();
        const float* kr = k_f32(j);
        __m256 t = _mm256_setzero_ps();
        for (int64_t r = 0; r < rows_t; ++r) {
          t = _mm256_fmadd_ps(broadcast_k<kG>(kr, r), _mm256_loadu_ps(qh + 8 * r), t);
        }
        store_scores<kG>(&t, 1, st + kG * j);
      }
      // The online softmax of the G heads (softmax_block's steps, lane-wise) over the nb * G
      // scores: whole vectors, then (G = 4, nb odd) one key in the low half, repeated for the
      // maximum and left out of the sum. A head whose scores are all -inf (only with infinite
      // inputs) gets weights 0: its maximum stays -inf and the shift is taken as 0
      // (e^(-inf - 0) = 0, where e^(-inf - -inf) would be NaN).
      const int64_t n_vec = nb * kG / 8;
      const bool half = nb * kG % 8 != 0;
      __m256 bm = ninf;
      for (int64_t i = 0; i < n_vec; ++i) bm = _mm256_max_ps(_mm256_loadu_ps(st + 8 * i), bm);
      if (half) bm = _mm256_max_ps(load_heads<kG>(st + 8 * n_vec), bm);
      bm = fold_max<kG>(bm);
      const __m256 m_old = load_heads<kG>(mx + h * group);
      const __m256 m_new = _mm256_max_ps(bm, m_old);
      const __m256 shift = _mm256_blendv_ps(m_new, _mm256_setzero_ps(),
                                            _mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ));
      __m256 s_sum = _mm256_setzero_ps();
      for (int64_t i = 0; i < n_vec; ++i) {
        const __m256 p = S::exp(_mm256_sub_ps(_mm256_loadu_ps(st + 8 * i), shift));
        _mm256_storeu_ps(st + 8 * i, p);
        s_sum = _mm256_add_ps(s_sum, p);
      }
      if (half) {
        const __m256 p = S::exp(_mm256_sub_ps(load_heads<kG>(st + 8 * n_vec), shift));
        _mm_storeu_ps(st + 8 * n_vec, _mm256_castps256_ps128(p));
        s_sum = _mm256_add_ps(s_sum, _mm256_blend_ps(p, _mm256_setzero_ps(), 0xf0));
      }
      s_sum = fold_add<kG>(s_sum);
      // corr = e^(m_old - m_new) where the maximum grew (0 on the first block), else exactly 1.
      const __m256 grew = _mm256_cmp_ps(m_new, m_old, _CMP_NEQ_UQ);
      const __m256 corr =
          _mm256_blendv_ps(_mm256_set1_ps(1.0f), S::exp(_mm256_sub_ps(m_old, shift)), grew);
      store_heads<kG>(sum + h * group,
                      _mm256_fmadd_ps(load_heads<kG>(sum + h * group), corr, s_sum), group);
      store_heads<kG>(mx + h * group, m_new, group);
      if (_mm256_movemask_ps(grew) != 0) {
        alignas(32) float c[8];
        _mm256_store_ps(c, corr);
        for (int g = 0; g < group; ++g) {
          if (c[g] != 1.0f) scale_in_place<S>(acc + g * hd, hd, c[g]);
        }
      }
      if constexpr (D == KvDtype::kF32) pf.drain_near();
      // The sums hold the plain weights; the V accumulation takes the V row scales.
      if constexpr (KvLoad<S, D>::kRowScale) {
        for (int64_t i = 0; i < nb; ++i) {
          const float vs = KvLoad<S, D>::row_scale(vr[i], hd);
          for (int g = 0; g < kG; ++g) st[i * kG + g] *= vs;
        }
      }
      // V: head h's weight of key j at st[G j + h].
      accumulate_v_heads<S, D, kHd, 1, kG>(acc, hd, st, group, vr, nb, pf);
    }
    pf.drain();
  }
  finish_range<S>(a, mx, sum);
}

template <KvDtype D, int kG>
void attention_range_lanes_g(const detail::AttentionRange& a) {
  switch (a.head_dim) {
    case 64: return attention_range_lanes<D, kG, 64>(a);
    case 128: return attention_range_lanes<D, kG, 128>(a);
    default: return attention_range_lanes<D, kG, 0>(a);
  }
}

template <KvDtype D>
void attention_range_lanes_d(const detail::AttentionRange& a) {
  if (a.group > 4) return attention_range_lanes_g<D, 8>(a);
  attention_range_lanes_g<D, 4>(a);
}

// The range (attention_lanes_takes(a) must hold).
inline void attention_range_lanes_avx2(const detail::AttentionRange& a) {
  switch (a.dtype) {
    case KvDtype::kF32: return attention_range_lanes_d<KvDtype::kF32>(a);
    case KvDtype::kBF16: return attention_range_lanes_d<KvDtype::kBF16>(a);
    case KvDtype::kF8E4M3: return attention_range_lanes_d<KvDtype::kF8E4M3>(a);
    case KvDtype::kI8: return attention_range_lanes_d<KvDtype::kI8>(a);
    case KvDtype::kI4: return attention_range_lanes_d<KvDtype::kI4>(a);
  }
}

}  // namespace
}  // namespace sampan::cpu
