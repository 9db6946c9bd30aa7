// Attention of a block of consecutive query tokens of one sequence (a prefill chunk) against the
// paged cache, one KV head per call: the block's n_tok tokens times the KV head's `group` query
// heads are R = n_tok * group query rows that share every K and V row they read. The per-token
// loop (kv_quant_impl.h) reads and dequantizes each key once per token; here each key block is
// dequantized once per R rows into f32 scratch and both products run as small GEMMs on the FMA
// units. Instantiated next to the per-token loop (attention_cpu.cc for AVX2,
// attention_avx512.cc); attention_cpu.cc decides which tokens take it (detail::PrefillBlock in
// attention_impl.h states the contract).
//
// Layout: the query rows sit in the vector lanes ("rows in lanes"). q is packed transposed,
// Qt [head_dim, Rp] (Rp = R rounded up to the vector width), and a key block of kPrefillKeys
// positions as f32 rows K [keys, head_dim], V [keys, head_dim]. Then
//   scores  St[j, r] = sum_d K[j, d] Qt[d, r]: a broadcast of K[j, d] times a vector of Qt[d];
//   softmax over j, lane by lane: the block maximum, e^(s - m) and the running sums are plain
//           vector operations (no horizontal reduction anywhere);
//   values  Ot[d, r] += sum_j V[j, d] P[j, r]: a broadcast of V[j, d] times a vector of P[j];
// and Ot is written back transposed and normalised. Every lane (query row) goes through the same
// operations in the same order whatever the other lanes hold, and key blocks start at multiples
// of kPrefillKeys (positions, not offsets into the range), so a row's result does not depend on
// how the prompt was cut into chunks or blocks: blocks that are masked for a row add exactly
// nothing to it.
#pragma once













#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/kv_quant_impl.h"

namespace sampan::cpu {
namespace {

// acc[kt][rv] = sum_d K[jt + kt, d] Qt[d, rv0 + rv] for kKt keys and kRv row vectors, stored to
// St rows jt .. jt + kKt - 1. Registers: kKt * kRv accumulators, kRv Qt vectors, a broadcast.
template <class S, int kRv, int kKt, int kHd>
inline void prefill_scores(const float* qt, int64_t rp, const float* kbuf, int64_t hd_rt,
                           int64_t jt, int64_t rv0, float* st) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  V acc[kKt][kRv];
#pragma GCC unroll 8
  for (int kt = 0; kt < kKt; ++kt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) acc[kt][rv] = S::zero();
  }
  const float* kr = kbuf + jt * hd;
  const float* qr = qt + rv0 * kW;
  for (int64_t d = 0; d < hd; ++d) {
    V qv[kRv];
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) qv[rv] = S::load(qr + d * rp + rv * kW);
#pragma GCC unroll 8
    for (int kt = 0; kt < kKt; ++kt) {
      const V b = S::set1(kr[kt * hd + d]);
#pragma GCC unroll 4
      for (int rv = 0; rv < kRv; ++rv) acc[kt][rv] = S::fma(b, qv[rv], acc[kt][rv]);
    }
  }
#pragma GCC unroll 8
  for (int kt = 0; kt < kKt; ++kt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) S::store(st + (jt + kt) * rp + (rv0 + rv) * kW, acc[kt][rv]);
  }
}

// Ot[d0 + dt, rv0 + rv] = Ot * corr + sum_{j < nk} V[j, d0 + dt] P[j, rv0 + rv] for kDt head
// dimensions and kRv row vectors; the accumulators stay in registers over the key block.
template <class S, int kRv, int kDt, int kHd>
inline void prefill_values(float* ot, int64_t rp, const float* st, const float* vbuf,
                           int64_t hd_rt, int64_t nk, const float* corr, int64_t d0,
                           int64_t rv0) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  V acc[kDt][kRv];
  V c[kRv];
#pragma GCC unroll 4
  for (int rv = 0; rv < kRv; ++rv) c[rv] = S::load(corr + (rv0 + rv) * kW);
#pragma GCC unroll 8
  for (int dt = 0; dt < kDt; ++dt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) {
      acc[dt][rv] = S::mul(S::load(ot + (d0 + dt) * rp + (rv0 + rv) * kW), c[rv]);
    }
  }
  const float* vr = vbuf + d0;
  const float* pr = st + rv0 * kW;
  for (int64_t j = 0; j < nk; ++j) {
    V p[kRv];
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) p[rv] = S::load(pr + j * rp + rv * kW);
#pragma GCC unroll 8
    for (int dt = 0; dt < kDt; ++dt) {
      const V b = S::set1(vr[j * hd + dt]);
#pragma GCC unroll 4
      for (int rv = 0; rv < kRv; ++rv) acc[dt][rv] = S::fma(b, p[rv], acc[dt][rv]);
    }
  }
#pragma GCC unroll 8
  for (int dt = 0; dt < kDt; ++dt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) S::store(ot + (d0 + dt) * rp + (rv0 + rv) * kW, acc[dt][rv]);
  }
}

// Row tiles: kRowVecs vectors of rows at a time (the last tile takes what is left), so the
// scores use kRowVecs * kKeyTile accumulators and the values kRowVecs * kDimTile: 16 of the 32
// zmm registers on AVX-512, 12 of the 16 ymm on AVX2, leaving room for the operands. Measured
// (bench_attention prefill 512, Zen 5, 1 thread): on AVX-512, 2 x 8, 2 x 4 + 4 x 4 and 4 x 4
// within noise of each other; on AVX2, 3 x 4 1.07x the speed of 2 x 4.
template <class S>
struct PrefillTiles {
  static constexpr int kRowVecs = S::kWidth == 16 ? 4 : 3;
  static constexpr int kKeyTile = 4;
  static constexpr int kDimTile = 4;
};

// Calls f.template operator()<kRv>(rv0) over nrv row vectors, kRowVecs at a time; the last tile
// takes what is left (1 .. kRowVecs - 1 vectors).
template <int kRowVecs, class F>
inline void for_row_tiles(int64_t nrv, F&& f) {
  static_assert(kRowVecs >= 1 && kRowVecs <= 4);
  for (int64_t rv0 = 0; rv0 < nrv; rv0 += kRowVecs) {
    const int64_t left = nrv - rv0;
    if (left >= kRowVecs) {
      f.template operator()<kRowVecs>(rv0);
    } else if (left == 3) {
      f.template operator()<3>(rv0);
    } else if (left == 2) {
      f.template operator()<2>(rv0);
    } else {
      f.template operator()<1>(rv0);
    }
  }
}

template <class S, int kHd>
void prefill_scores_all(const float* qt, int64_t rp, const float* kbuf, int64_t hd, int64_t nk,
                        float* st) {
  constexpr int kKt = PrefillTiles<S>::kKeyTile;
  for_row_tiles<PrefillTiles<S>::kRowVecs>(rp / S::kWidth, [&]<int kRv>(int64_t rv0) {
    for (int64_t jt = 0; jt < nk; jt += kKt) {  // key rows past nk are zeros (kbuf padding)
      prefill_scores<S, kRv, kKt, kHd>(qt, rp, kbuf, hd, jt, rv0, st);
    }
  });
}

template <class S, int kHd>
void prefill_values_all(float* ot, int64_t rp, const float* st, const float* vbuf, int64_t hd,
                        int64_t nk, const float* corr) {
  constexpr int kDt = PrefillTiles<S>::kDimTile;
  for_row_tiles<PrefillTiles<S>::kRowVecs>(rp / S::kWidth, [&]<int kRv>(int64_t rv0) {
    int64_t d0 = 0;
    for (; d0 + kDt <= hd; d0 += kDt) {
      prefill_values<S, kRv, kDt, kHd>(ot, rp, st, vbuf, hd, nk, corr, d0, rv0);
    }
    for (; d0 < hd; ++d0) prefill_values<S, kRv, 1, kHd>(ot, rp, st, vbuf, hd, nk, corr, d0, rv0);
  });
}

// dst [hd] = the dequantized head record rec (kv_quant.h layout of D), times its row scale.
template <class S, KvDtype D, int kHd>
inline void prefill_dequant_row(const uint8_t* rec, int64_t hd_rt, float* dst) {
  using L = KvLoad<S, D>;
  constexpr int kW = S::kWidth;
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  const auto rs = S::set1(L::row_scale(rec, hd));
  int64_t d = 0;
  for (; d + kW <= hd; d += kW) {
    auto v = L::load(rec, d, hd);
    if constexpr (L::kRowScale) v = S::mul(v, rs);
    S::store(dst + d, v);
  }
  if (d < hd) {
    auto v = L::tail(rec, d, hd);
    if constexpr (L::kRowScale) v = S::mul(v, rs);
    S::store_n(dst + d, v, static_cast<int>(hd - d));
  }
}

// The pieces of a block's pass that do not depend on how the products are done (f32 here, bf16
// pairs in attention_prefill_avx512_bf16.cc). Scratch: PrefillScratch below.
struct PrefillScratch {
  float* qt;    // [hd, rp] q * scale, transposed (bf16: [hd / 2, rp] pairs)
  float* ot;    // [hd, rp] unnormalised outputs, transposed
  float* st;    // [kPrefillKeys, rp] scores, then weights (bf16: then pairs of weights)
  float* kbuf;  // [kPrefillKeys, hd] the key block, dequantized (bf16: [keys, hd / 2] pairs)
  float* vbuf;  // [kPrefillKeys, hd] (bf16: [keys / 2, hd] pairs)
  float* mx;    // [rp] running maxima
  float* lsum;  // [rp] running sums
  float* corr;  // [rp] this block's rescale of the running values
  float* tmp;   // [2, hd rounded up to 32] (bf16 kernel: dequantized rows before pairing)
};

inline PrefillScratch prefill_scratch(float* base, int64_t rp, int64_t hd) {
  constexpr int64_t kKB = detail::kPrefillKeys;
  PrefillScratch w;
  w.qt = base;
  w.ot = w.qt + hd * rp;
  w.st = w.ot + hd * rp;
  w.kbuf = w.st + kKB * rp;
  w.vbuf = w.kbuf + kKB * hd;
  w.mx = w.vbuf + kKB * hd;
  w.lsum = w.mx + rp;
  w.corr = w.lsum + rp;
  w.tmp = w.corr + rp;
  return w;
}

// Calls f(r, src) for each query row r < n_tok * group of the block, src its q (head_dim f32).
template <class F>
inline void for_each_query_row(const detail::PrefillBlock& a, F&& f) {
  const int64_t rows = a.n_tok * a.group, h0 = a.kv_head * a.group;
  for (int64_t r = 0; r < rows; ++r) {
    f(r, a.q + (r / a.group) * a.ldq + (h0 + r % a.group) * a.head_dim);
  }
}

#if defined(__AVX512F__)
// AVX-512: calls f(r0, nr, d0, src, sc) for the query rows in groups of 16 (nr <= 16 rows from
// r0) and each d0 = 0, d_step, ... < hd: src[i] (i < nr) is row r0 + i's q (head_dim f32), sc
// `scale` broadcast; f loads and transposes the 16 x d_step tile itself.
template <class F>
inline void for_q_tiles_avx512(const detail::PrefillBlock& a, int64_t hd, int64_t d_step,
                               float scale, F&& f) {
  const int64_t rows = a.n_tok * a.group, h0 = a.kv_head * a.group;
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const float* src[16];
    const int64_t nr = std::min<int64_t>(16, rows - r0);
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t r = r0 + i;
      src[i] = a.q + (r / a.group) * a.ldq + (h0 + r % a.group) * hd;
    }
    for (int64_t d0 = 0; d0 < hd; d0 += d_step) {
      f(r0, nr, d0, src, sc);
    }
  }
}
#endif

// Qt [hd, rp] = q * scale, transposed (zeros in the padding rows).
template <class S>
inline void prefill_pack_q(const detail::PrefillBlock& a, int64_t hd, int64_t rp, float* qt) {
#if defined(__AVX512F__)
  if constexpr (S::kWidth == 16) {
    // 16 x 16 blocks transposed in registers: ~8x the speed of the scalar loop below, which was
    // ~10 % of the kernel's time at 128 query rows (perf, bench_attention prefill 512).
    for_q_tiles_avx512(a, hd, 16, a.scale,
                       [&](int64_t r0, int64_t nr, int64_t d0, const float* const* src,
                           __m512 sc) {
                         const int64_t nd = std::min<int64_t>(16, hd - d0);
                         const auto m = static_cast<__mmask16>((1u << nd) - 1u);
                         __m512i v[16];
                         for (int64_t i = 0; i < 16; ++i) {
                           v[i] = i < nr ? _mm512_castps_si512(_mm512_mul_ps(
                                               _mm512_maskz_loadu_ps(m, src[i] + d0), sc))
                                         : _mm512_setzero_si512();
                         }
                         gemm_detail::transpose16(v);
                         for (int64_t i = 0; i < nd; ++i) {
                           _mm512_storeu_si512(qt + (d0 + i) * rp + r0, v[i]);
                         }
                       });
    return;
  }
#endif
  std::fill(qt, qt + hd * rp, 0.0f);
  for_each_query_row(a, [&](int64_t r, const float* src) {
    for (int64_t d = 0; d < hd; ++d) qt[d * rp + r] = src[d] * a.scale;
  });
}

// The rows' outputs: out = Ot[., r] / lsum[r] (0 for a row that saw only masked keys).
template <class S>
inline void prefill_write_out(const detail::PrefillBlock& a, const float* ot, const float* lsum,
                              int64_t rp) {
  const int64_t rows = a.n_tok * a.group, h0 = a.kv_head * a.group, hd = a.head_dim;
#if defined(__AVX512F__)
  if constexpr (S::kWidth == 16) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      const int64_t nr = std::min<int64_t>(16, rows - r0);
      for (int64_t d0 = 0; d0 < hd; d0 += 16) {
        const int64_t nd = std::min<int64_t>(16, hd - d0);
        const auto m = static_cast<__mmask16>((1u << nd) - 1u);
        __m512i v[16];
        for (int64_t i = 0; i < 16; ++i) {
          v[i] = i < nd ? _mm512_loadu_si512(ot + (d0 + i) * rp + r0) : _mm512_setzero_si512();
        }
        gemm_detail::transpose16(v);
        for (int64_t i = 0; i < nr; ++i) {
          const int64_t r = r0 + i;
          const float inv = lsum[r] > 0.0f ? 1.0f / lsum[r] : 0.0f;
          float* dst = a.out + (r / a.group) * a.ldo + (h0 + r % a.group) * hd;
          _mm512_mask_storeu_ps(dst + d0, m,
                                _mm512_mul_ps(_mm512_castsi512_ps(v[i]), _mm512_set1_ps(inv)));
        }
      }
    }
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = lsum[r] > 0.0f ? 1.0f / lsum[r] : 0.0f;
    float* dst = a.out + (r / a.group) * a.ldo + (h0 + r % a.group) * hd;
    for (int64_t d = 0; d < hd; ++d) dst[d] = ot[d * rp + r] * inv;
  }
}

// Calls f(j, rec_k, rec_v) for keys j < nk_pad of the block at j0: the K and V head records of
// key j0 + j, or nullptrs where the key is below kfirst (its cache block may be unmapped) or at
// j >= nk (tile padding): those rows must be zeros.
template <class F>
inline void for_each_block_key(const detail::PrefillBlock& a, int64_t head_bytes, int64_t j0,
                               int64_t nk, int64_t nk_pad, int64_t kfirst, F&& f) {
  const int64_t bs = a.block_size;
  for (int64_t j = 0; j < nk_pad; ++j) {
    const int64_t key = j0 + j;
    if (j >= nk || key < kfirst) {
      f(j, nullptr, nullptr);
      continue;
    }
    const int64_t row = static_cast<int64_t>(a.blocks[key / bs]) * bs + key % bs;
    const int64_t off = row * a.ld_bytes + a.kv_head * head_bytes;
    f(j, a.k_rows + off, a.v_rows + off);
  }
}

// Causal and window masks of the scores St [nk, rp] of the key block at j0: key j is seen by the
// rows of tokens at positions j .. j + window - 1, a contiguous range of rows. Only blocks on the
// diagonal or the window's edge need it.
inline void prefill_mask(const detail::PrefillBlock& a, int64_t j0, int64_t nk, int64_t rp,
                         float* st) {
  const int64_t p0 = a.p0, window = a.window, group = a.group;
  const int64_t kfirst_last = attention_first_key(a.p0 + a.n_tok - 1, window);
  if (j0 + nk - 1 <= p0 && j0 >= kfirst_last) return;
  for (int64_t j = 0; j < nk; ++j) {
    const int64_t key = j0 + j;
    float* s = st + j * rp;
    const int64_t ra = std::clamp<int64_t>((key - p0) * group, 0, rp);
    for (int64_t r = 0; r < ra; ++r) s[r] = -INFINITY;
    if (window > 0) {
      const int64_t rb = std::clamp<int64_t>((key + window - p0) * group, 0, rp);
      for (int64_t r = rb; r < rp; ++r) s[r] = -INFINITY;
    }
  }
}

// Online softmax of row vector rv over the block's nk keys, lane by lane: St becomes e^(s - m)
// with m the updated running maxima; lsum and corr (the rescale of the running values) follow.
// A row whose keys so far are all masked keeps m = -inf; the shift is then -FLT_MAX, so its
// weights and its rescale come out 0 instead of NaN.
template <class S>
inline void prefill_softmax(const PrefillScratch& w, int64_t rp, int64_t rv, int64_t nk) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  float* st = w.st + rv * kW;
  const V m_old = S::load(w.mx + rv * kW);
  V bm = S::set1(-INFINITY);
  for (int64_t j = 0; j < nk; ++j) bm = S::max(bm, S::load(st + j * rp));
  const V m_new = S::max(m_old, bm);
  const V shift = S::max(m_new, S::set1(-FLT_MAX));
  V sum = S::zero();
  for (int64_t j = 0; j < nk; ++j) {
    const V p = S::exp(S::sub(S::load(st + j * rp), shift));
    S::store(st + j * rp, p);
    sum = S::add(sum, p);
  }
  const V c = S::exp(S::sub(m_old, shift));  // 1 when the maximum held, 0 on the first keys
  S::store(w.corr + rv * kW, c);
  S::store(w.lsum + rv * kW, S::fma(S::load(w.lsum + rv * kW), c, sum));
  S::store(w.mx + rv * kW, m_new);
}

template <class S, KvDtype D, int kHd>
void kv_prefill_block(const detail::PrefillBlock& a) {
  constexpr int kW = S::kWidth;
  constexpr int64_t kKB = detail::kPrefillKeys;
  constexpr int kKt = PrefillTiles<S>::kKeyTile;
  const int64_t hd = kHd > 0 ? kHd : a.head_dim;
  const int64_t rp = detail::prefill_rows_padded(a.n_tok, a.group, kW);
  const int64_t nrv = rp / kW;
  const int64_t head_bytes = kv_head_bytes(D, hd);
  const PrefillScratch w = prefill_scratch(a.scratch, rp, hd);

  // q is read before out is written, so out may be q itself. Padding rows are zeros.
  prefill_pack_q<S>(a, hd, rp, w.qt);
  std::fill(w.ot, w.ot + hd * rp, 0.0f);
  std::fill(w.mx, w.mx + rp, -INFINITY);
  std::fill(w.lsum, w.lsum + rp, 0.0f);

  const int64_t p_last = a.p0 + a.n_tok - 1;
  const int64_t kfirst = attention_first_key(a.p0, a.window);
  for (int64_t j0 = kfirst / kKB * kKB; j0 <= p_last; j0 += kKB) {
    const int64_t nk = std::min(kKB, p_last - j0 + 1);  // keys past p_last are seen by no row
    const int64_t nk_pad = (nk + kKt - 1) / kKt * kKt;
    for_each_block_key(a, head_bytes, j0, nk, nk_pad, kfirst,
                       [&](int64_t j, const uint8_t* kr, const uint8_t* vr) {
                         if (kr == nullptr) {
                           std::fill(w.kbuf + j * hd, w.kbuf + (j + 1) * hd, 0.0f);
                           std::fill(w.vbuf + j * hd, w.vbuf + (j + 1) * hd, 0.0f);
                           return;
                         }
                         prefill_dequant_row<S, D, kHd>(kr, hd, w.kbuf + j * hd);
                         prefill_dequant_row<S, D, kHd>(vr, hd, w.vbuf + j * hd);
                       });
    prefill_scores_all<S, kHd>(w.qt, rp, w.kbuf, hd, nk, w.st);
    prefill_mask(a, j0, nk, rp, w.st);
    for (int64_t rv = 0; rv < nrv; ++rv) prefill_softmax<S>(w, rp, rv, nk);
    prefill_values_all<S, kHd>(w.ot, rp, w.st, w.vbuf, hd, nk, w.corr);
  }
  prefill_write_out<S>(a, w.ot, w.lsum, rp);
}

template <class S, KvDtype D>
void kv_prefill_block_hd(const detail::PrefillBlock& a) {
  switch (a.head_dim) {
    case 64:
      return kv_prefill_block<S, D, 64>(a);
    case 128:
      return kv_prefill_block<S, D, 128>(a);
    default:
      return kv_prefill_block<S, D, 0>(a);
  }
}

template <class S>
void prefill_block_any(const detail::PrefillBlock& a) {
  switch (a.dtype) {
    case KvDtype::kF32: return kv_prefill_block_hd<S, KvDtype::kF32>(a);
    case KvDtype::kBF16: return kv_prefill_block_hd<S, KvDtype::kBF16>(a);
    case KvDtype::kF8E4M3: return kv_prefill_block_hd<S, KvDtype::kF8E4M3>(a);
    case KvDtype::kI8: return kv_prefill_block_hd<S, KvDtype::kI8>(a);
    case KvDtype::kI4: return kv_prefill_block_hd<S, KvDtype::kI4>(a);
  }
}

}  // namespace
}  // namespace sampan::cpu
