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

template <class S, int kHd>
void prefill_scores_all(const float* qt, int64_t rp, const float* kbuf, int64_t hd, int64_t nk,
                        float* st) {
  constexpr int kRv = PrefillTiles<S>::kRowVecs, kKt = PrefillTiles<S>::kKeyTile;
  const int64_t nrv = rp / S::kWidth;
  for (int64_t rv0 = 0; rv0 < nrv; rv0 += kRv) {
    const int64_t left = nrv - rv0;
    for (int64_t jt = 0; jt < nk; jt += kKt) {  // key rows past nk are zeros (kbuf padding)
      if (left >= kRv) {
        prefill_scores<S, kRv, kKt, kHd>(qt, rp, kbuf, hd, jt, rv0, st);
      } else if (left == 3) {
        prefill_scores<S, 3, kKt, kHd>(qt, rp, kbuf, hd, jt, rv0, st);
      } else if (left == 2) {
        prefill_scores<S, 2, kKt, kHd>(qt, rp, kbuf, hd, jt, rv0, st);
      } else {
        prefill_scores<S, 1, kKt, kHd>(qt, rp, kbuf, hd, jt, rv0, st);
      }
    }
  }
}

template <class S, int kRv, int kHd>
void prefill_values_rows(float* ot, int64_t rp, const float* st, const float* vbuf, int64_t hd,
                         int64_t nk, const float* corr, int64_t rv0) {
  constexpr int kDt = PrefillTiles<S>::kDimTile;
  int64_t d0 = 0;
  for (; d0 + kDt <= hd; d0 += kDt) {
    prefill_values<S, kRv, kDt, kHd>(ot, rp, st, vbuf, hd, nk, corr, d0, rv0);
  }
  for (; d0 < hd; ++d0) prefill_values<S, kRv, 1, kHd>(ot, rp, st, vbuf, hd, nk, corr, d0, rv0);
}

template <class S, int kHd>
void prefill_values_all(float* ot, int64_t rp, const float* st, const float* vbuf, int64_t hd,
                        int64_t nk, const float* corr) {
  constexpr int kRv = PrefillTiles<S>::kRowVecs;
  const int64_t nrv = rp / S::kWidth;
  for (int64_t rv0 = 0; rv0 < nrv; rv0 += kRv) {
    const int64_t left = nrv - rv0;
    if (left >= kRv) {
      prefill_values_rows<S, kRv, kHd>(ot, rp, st, vbuf, hd, nk, corr, rv0);
    } else if (left == 3) {
      prefill_values_rows<S, 3, kHd>(ot, rp, st, vbuf, hd, nk, corr, rv0);
    } else if (left == 2) {
      prefill_values_rows<S, 2, kHd>(ot, rp, st, vbuf, hd, nk, corr, rv0);
    } else {
      prefill_values_rows<S, 1, kHd>(ot, rp, st, vbuf, hd, nk, corr, rv0);
    }
  }
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

template <class S, KvDtype D, int kHd>
void kv_prefill_block(const detail::PrefillBlock& a) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  constexpr int64_t kKB = detail::kPrefillKeys;
  const int64_t hd = kHd > 0 ? kHd : a.head_dim;
  const int64_t group = a.group;
  const int64_t rows = a.n_tok * group;
  const int64_t rp = detail::prefill_rows_padded(a.n_tok, group, kW);
  const int64_t nrv = rp / kW;
  const int64_t head_bytes = kv_head_bytes(D, hd);
  float* qt = a.scratch;          // [hd, rp] q * scale, transposed
  float* ot = qt + hd * rp;       // [hd, rp] unnormalised outputs, transposed
  float* st = ot + hd * rp;       // [kKB, rp] scores, then weights
  float* kbuf = st + kKB * rp;    // [kKB, hd] the key block, dequantized
  float* vbuf = kbuf + kKB * hd;  // [kKB, hd]
  float* mx = vbuf + kKB * hd;    // [rp] running maxima
  float* lsum = mx + rp;          // [rp] running sums
  float* corr = lsum + rp;        // [rp] this block's rescale of the running values

  // q is read before out is written, so out may be q itself.
  const int64_t h0 = a.kv_head * group;
  for (int64_t r = 0; r < rp; ++r) {
    if (r < rows) {
      const float* src = a.q + (r / group) * a.ldq + (h0 + r % group) * hd;
      for (int64_t d = 0; d < hd; ++d) qt[d * rp + r] = src[d] * a.scale;
    } else {
      for (int64_t d = 0; d < hd; ++d) qt[d * rp + r] = 0.0f;
    }
  }
  std::fill(ot, ot + hd * rp, 0.0f);
  std::fill(mx, mx + rp, -INFINITY);
  std::fill(lsum, lsum + rp, 0.0f);

  const int64_t p0 = a.p0, p_last = a.p0 + a.n_tok - 1;
  const int64_t window = a.window;
  const int64_t kfirst = attention_first_key(p0, window);
  // The first key any row of the block's last token sees: below it, a key is masked for some row.
  const int64_t kfirst_last = attention_first_key(p_last, window);
  const int64_t bs = a.block_size;
  constexpr int kKt = PrefillTiles<S>::kKeyTile;
  const V floor = S::set1(-FLT_MAX);
  for (int64_t j0 = kfirst / kKB * kKB; j0 <= p_last; j0 += kKB) {
    const int64_t nk = std::min(kKB, p_last - j0 + 1);  // keys past p_last are seen by no row
    const int64_t nk_pad = (nk + kKt - 1) / kKt * kKt;
    for (int64_t j = 0; j < nk_pad; ++j) {
      const int64_t key = j0 + j;
      if (j >= nk || key < kfirst) {
        // Never read: below the window (its block may be unmapped) or padding of the key tile.
        std::fill(kbuf + j * hd, kbuf + (j + 1) * hd, 0.0f);
        std::fill(vbuf + j * hd, vbuf + (j + 1) * hd, 0.0f);
        continue;
      }
      const int64_t row = static_cast<int64_t>(a.blocks[key / bs]) * bs + key % bs;
      const int64_t off = row * a.ld_bytes + a.kv_head * head_bytes;
      prefill_dequant_row<S, D, kHd>(a.k_rows + off, hd, kbuf + j * hd);
      prefill_dequant_row<S, D, kHd>(a.v_rows + off, hd, vbuf + j * hd);
    }
    prefill_scores_all<S, kHd>(qt, rp, kbuf, hd, nk, st);
    // Causal and window masks: key j is seen by the rows of tokens at positions j .. j + window
    // - 1, a contiguous range of rows. Only blocks on the diagonal or the window's edge need it.
    if (j0 + nk - 1 > p0 || j0 < kfirst_last) {
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
    // Online softmax, lane by lane. A row whose keys so far are all masked keeps m = -inf; the
    // shift is then -FLT_MAX, so its weights and its rescale come out 0 instead of NaN.
    for (int64_t rv = 0; rv < nrv; ++rv) {
      const V m_old = S::load(mx + rv * kW);
      V bm = S::set1(-INFINITY);
      for (int64_t j = 0; j < nk; ++j) bm = S::max(bm, S::load(st + j * rp + rv * kW));
      const V m_new = S::max(m_old, bm);
      const V shift = S::max(m_new, floor);
      V sum = S::zero();
      for (int64_t j = 0; j < nk; ++j) {
        const V p = S::exp(S::sub(S::load(st + j * rp + rv * kW), shift));
        S::store(st + j * rp + rv * kW, p);
        sum = S::add(sum, p);
      }
      const V c = S::exp(S::sub(m_old, shift));  // 1 when the maximum held, 0 on the first keys
      S::store(corr + rv * kW, c);
      S::store(lsum + rv * kW, S::fma(S::load(lsum + rv * kW), c, sum));
      S::store(mx + rv * kW, m_new);
    }
    prefill_values_all<S, kHd>(ot, rp, st, vbuf, hd, nk, corr);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = lsum[r] > 0.0f ? 1.0f / lsum[r] : 0.0f;
    float* dst = a.out + (r / group) * a.ldo + (h0 + r % group) * hd;
    for (int64_t d = 0; d < hd; ++d) dst[d] = ot[d * rp + r] * inv;
  }
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
