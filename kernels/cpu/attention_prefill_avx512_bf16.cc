// The prefill attention kernel (attention_prefill_impl.h) with both products on vdpbf16ps, for
// GemmPrecision::kBf16 on CPUs that issue it at the FMA rate (bf16_panels_preferred(): AMD
// Zen 4 / 5): a vdpbf16ps does the work of two FMAs, so the products that are ~70 % of the f32
// kernel's time take half as long. Everything else is the f32 kernel's: the same blocks, masks,
// online softmax in f32 (the scores come out of vdpbf16ps in f32) and lane-per-row layout.
//
// Operands as bf16 pairs (one 32-bit lane = two bf16, which vdpbf16ps multiplies pairwise and
// adds into one f32 lane):
//   scores  St[j, r] = sum over pairs (K[j, 2i], K[j, 2i+1]) . (Q[r, 2i], Q[r, 2i+1]): q packed
//           as Qt2 [hd / 2, rp] pairs along the head dimension (rows in the lanes), the key row
//           as bf16 in order (which is already pairs along d), one pair broadcast per product;
//   values  Ot[d, r] += sum over pairs (V[2i, d], V[2i+1, d]) . (P[2i, r], P[2i+1, r]): the
//           weights paired along the keys in place of the f32 ones, V as V2 [keys / 2, hd].
// An odd head size or key count is padded with zeros (and zero weights).
//
// Accuracy (GemmPrecision::kBf16 rounds activations to bf16): q * scale, K, V and the softmax
// weights are rounded to bf16 (round to nearest even, relative error <= 2^-9 each); sums and
// the softmax stay f32. A score moves by at most d = 2^-8 * scale * sum_i |q_i k_i| (two
// roundings per product), which moves each weight by a factor within e^(+-2d) after
// normalisation, and the weights' and V's roundings add 2^-9 max |v| each, so an output is off
// by at most max |v| (e^(2d) - 1 + 2^-8) plus f32 rounding; test_paged_attention checks this
// bound. Denormal bf16 inputs are read as zero by vdpbf16ps: only weights below 2^-126 of the
// row's largest (negligible) and q or k elements below 2^-126.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/vec_avx512.h"
#include "kernels/cpu/attention_prefill_impl.h"

namespace sampan::cpu {
namespace {

// dword i = bf16(lo[i]) | bf16(hi[i]) << 16, both rounded to nearest even.
inline __m512i bf16_pairs(__m512 lo, __m512 hi) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  // Words 0..15 from lo, 16..31 from hi.
  const __m512i c = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), c);
}

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// acc[kt][rv] = St rows jt .. jt + kKt - 1, row vectors rv0 .. rv0 + kRv - 1.
template <int kRv, int kKt, int kHd>
inline void scores_bf16(const uint32_t* qt2, int64_t rp, const uint32_t* k2, int64_t hd2_rt,
                        int64_t jt, int64_t rv0, float* st) {
  const int64_t hd2 = kHd > 0 ? (kHd + 1) / 2 : hd2_rt;
  __m512 acc[kKt][kRv];
#pragma GCC unroll 8
  for (int kt = 0; kt < kKt; ++kt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) acc[kt][rv] = _mm512_setzero_ps();
  }
  const uint32_t* kr = k2 + jt * hd2;
  const uint32_t* qr = qt2 + rv0 * 16;
  for (int64_t i = 0; i < hd2; ++i) {
    __m512i qv[kRv];
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) qv[rv] = _mm512_loadu_si512(qr + i * rp + rv * 16);
#pragma GCC unroll 8
    for (int kt = 0; kt < kKt; ++kt) {
      const __m512i b = _mm512_set1_epi32(static_cast<int>(kr[kt * hd2 + i]));
#pragma GCC unroll 4
      for (int rv = 0; rv < kRv; ++rv) {
        acc[kt][rv] = _mm512_dpbf16_ps(acc[kt][rv], as_bh(b), as_bh(qv[rv]));
      }
    }
  }
#pragma GCC unroll 8
  for (int kt = 0; kt < kKt; ++kt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) {
      _mm512_storeu_ps(st + (jt + kt) * rp + (rv0 + rv) * 16, acc[kt][rv]);
    }
  }
}

// Ot[d0 + dt, .] = Ot * corr + sum over key pairs of V2[pair, d0 + dt] . P2[pair, .].
template <int kRv, int kDt, int kHd>
inline void values_bf16(float* ot, int64_t rp, const uint32_t* p2, const uint32_t* v2,
                        int64_t hd_rt, int64_t n_pairs, const float* corr, int64_t d0,
                        int64_t rv0) {
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  __m512 acc[kDt][kRv];
  __m512 c[kRv];
#pragma GCC unroll 4
  for (int rv = 0; rv < kRv; ++rv) c[rv] = _mm512_loadu_ps(corr + (rv0 + rv) * 16);
#pragma GCC unroll 8
  for (int dt = 0; dt < kDt; ++dt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) {
      acc[dt][rv] = _mm512_mul_ps(_mm512_loadu_ps(ot + (d0 + dt) * rp + (rv0 + rv) * 16), c[rv]);
    }
  }
  const uint32_t* vr = v2 + d0;
  const uint32_t* pr = p2 + rv0 * 16;
  for (int64_t i = 0; i < n_pairs; ++i) {
    __m512i p[kRv];
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) p[rv] = _mm512_loadu_si512(pr + i * rp + rv * 16);
#pragma GCC unroll 8
    for (int dt = 0; dt < kDt; ++dt) {
      const __m512i b = _mm512_set1_epi32(static_cast<int>(vr[i * hd + dt]));
#pragma GCC unroll 4
      for (int rv = 0; rv < kRv; ++rv) {
        acc[dt][rv] = _mm512_dpbf16_ps(acc[dt][rv], as_bh(b), as_bh(p[rv]));
      }
    }
  }
#pragma GCC unroll 8
  for (int dt = 0; dt < kDt; ++dt) {
#pragma GCC unroll 4
    for (int rv = 0; rv < kRv; ++rv) {
      _mm512_storeu_ps(ot + (d0 + dt) * rp + (rv0 + rv) * 16, acc[dt][rv]);
    }
  }
}

// The f32 kernel's tiles (PrefillTiles<Avx512>): 4 row vectors by 4 keys or 4 dimensions.
constexpr int kRowVecs = PrefillTiles<Avx512>::kRowVecs;
constexpr int kKeyTile = PrefillTiles<Avx512>::kKeyTile;
constexpr int kDimTile = PrefillTiles<Avx512>::kDimTile;

template <int kRv, int kHd>
void values_bf16_rows(float* ot, int64_t rp, const uint32_t* p2, const uint32_t* v2,
                      int64_t hd_rt, int64_t n_pairs, const float* corr, int64_t rv0) {
  const int64_t hd = kHd > 0 ? kHd : hd_rt;
  int64_t d0 = 0;
  for (; d0 + kDimTile <= hd; d0 += kDimTile) {
    values_bf16<kRv, kDimTile, kHd>(ot, rp, p2, v2, hd, n_pairs, corr, d0, rv0);
  }
  if constexpr (kHd % kDimTile != 0 || kHd == 0) {
    for (; d0 < hd; ++d0) values_bf16<kRv, 1, kHd>(ot, rp, p2, v2, hd, n_pairs, corr, d0, rv0);
  }
}

template <KvDtype D, int kHd>
void kv_prefill_block_bf16(const detail::PrefillBlock& a) {
  using S = Avx512;
  constexpr int64_t kKB = detail::kPrefillKeys;
  const int64_t hd = kHd > 0 ? kHd : a.head_dim;
  const int64_t hd2 = (hd + 1) / 2;     // pairs along the head dimension
  const int64_t hd32 = (hd + 31) / 32 * 32;  // a staging row, whole vectors of pairs
  const int64_t rp = detail::prefill_rows_padded(a.n_tok, a.group, 16);
  const int64_t nrv = rp / 16;
  const int64_t head_bytes = kv_head_bytes(D, hd);
  const PrefillScratch w = prefill_scratch(a.scratch, rp, hd);
  auto* qt2 = reinterpret_cast<uint32_t*>(w.qt);  // [hd2, rp]
  auto* k2 = reinterpret_cast<uint32_t*>(w.kbuf);  // [kKB, hd2]
  auto* v2 = reinterpret_cast<uint32_t*>(w.vbuf);  // [kKB / 2, hd]
  auto* p2 = reinterpret_cast<uint32_t*>(w.st);    // [kKB / 2, rp], over the scores
  float* kf = w.tmp;                                // [hd32] a dequantized K row
  float* vf = w.tmp + hd32;                         // [hd32] an even key's V row
  std::fill(w.tmp, w.tmp + 2 * hd32, 0.0f);

  // Qt2: per 16 rows and 32 dimensions, each row's 16 pairs in a vector, transposed.
  for_q_tiles_avx512(a, hd, 32, a.scale,
                     [&](int64_t r0, int64_t nr, int64_t d0, const float* const* src, __m512 sc) {
                       const int64_t nd = std::min<int64_t>(32, hd - d0);
                       const auto m0 = static_cast<__mmask16>(
                           nd >= 16 ? 0xffffu : (1u << nd) - 1u);
                       const auto m1 = static_cast<__mmask16>(
                           nd >= 32 ? 0xffffu : nd > 16 ? (1u << (nd - 16)) - 1u : 0u);
                       __m512i v[16];
                       for (int64_t i = 0; i < 16; ++i) {
                         if (i >= nr) {
                           v[i] = _mm512_setzero_si512();
                           continue;
                         }
                         const __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, src[i] + d0), sc);
                         const __m512 hi =
                             _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, src[i] + d0 + 16), sc);
                         // 32 bf16 in order: pairs d0 / 2 .. d0 / 2 + 15 of row r0 + i.
                         v[i] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
                       }
                       gemm_detail::transpose16(v);
                       for (int64_t i = 0; i < (nd + 1) / 2; ++i) {
                         _mm512_storeu_si512(qt2 + (d0 / 2 + i) * rp + r0, v[i]);
                       }
                     });
  std::fill(w.ot, w.ot + hd * rp, 0.0f);
  std::fill(w.mx, w.mx + rp, -INFINITY);
  std::fill(w.lsum, w.lsum + rp, 0.0f);

  const int64_t p_last = a.p0 + a.n_tok - 1;
  const int64_t kfirst = attention_first_key(a.p0, a.window);
  const __mmask16 pair_tail = static_cast<__mmask16>((1u << (hd2 % 16)) - 1u);
  const __mmask16 dim_tail = static_cast<__mmask16>((1u << (hd % 16)) - 1u);
  for (int64_t j0 = kfirst / kKB * kKB; j0 <= p_last; j0 += kKB) {
    const int64_t nk = std::min(kKB, p_last - j0 + 1);
    const int64_t nk_pad = (nk + kKeyTile - 1) / kKeyTile * kKeyTile;  // even
    for_each_block_key(a, head_bytes, j0, nk, nk_pad, kfirst,
                       [&](int64_t j, const uint8_t* kr, const uint8_t* vr) {
      // K: the row in bf16, in order (pairs along d), zeros past hd.
      if (kr != nullptr) {
        prefill_dequant_row<S, D, kHd>(kr, hd, kf);
      } else {
        std::fill(kf, kf + hd, 0.0f);
      }
      uint32_t* kd = k2 + j * hd2;
      for (int64_t i = 0; i < hd2; i += 16) {
        const __m512i c = reinterpret_cast<__m512i>(
            _mm512_cvtne2ps_pbh(_mm512_loadu_ps(kf + 2 * i + 16), _mm512_loadu_ps(kf + 2 * i)));
        _mm512_mask_storeu_epi32(kd + i, hd2 - i >= 16 ? __mmask16(0xffff) : pair_tail, c);
      }
      // V: pairs of keys (2i, 2i + 1) per dimension; an even key's row waits for its partner.
      float* dst = (j & 1) == 0 ? vf : kf;  // kf is free again
      if (vr != nullptr) {
        prefill_dequant_row<S, D, kHd>(vr, hd, dst);
      } else {
        std::fill(dst, dst + hd, 0.0f);
      }
      if ((j & 1) == 0) return;
      uint32_t* vd = v2 + (j / 2) * hd;
      for (int64_t d = 0; d < hd; d += 16) {
        const __m512i pr = bf16_pairs(_mm512_loadu_ps(vf + d), _mm512_loadu_ps(kf + d));
        _mm512_mask_storeu_epi32(vd + d, hd - d >= 16 ? __mmask16(0xffff) : dim_tail, pr);
      }
    });
    for (int64_t jt = 0; jt < nk; jt += kKeyTile) {
      for_row_tiles<kRowVecs>(nrv, [&]<int kRv>(int64_t rv0) {
        scores_bf16<kRv, kKeyTile, kHd>(qt2, rp, k2, hd2, jt, rv0, w.st);
      });
    }
    prefill_mask(a, j0, nk, rp, w.st);
    // Softmax in f32, then the weights paired along the keys in place: pair i (keys 2i, 2i + 1)
    // goes to row i, whose scores were read at pair i / 2 <= i.
    const int64_t n_pairs = (nk + 1) / 2;
    for (int64_t rv = 0; rv < nrv; ++rv) {
      prefill_softmax<S>(w, rp, rv, nk);
      const float* sv = w.st + rv * 16;
      for (int64_t i = 0; i < n_pairs; ++i) {
        const __m512 lo = _mm512_loadu_ps(sv + 2 * i * rp);
        const __m512 hi = 2 * i + 1 < nk ? _mm512_loadu_ps(sv + (2 * i + 1) * rp)
                                         : _mm512_setzero_ps();
        _mm512_storeu_si512(p2 + i * rp + rv * 16, bf16_pairs(lo, hi));
      }
    }
    for_row_tiles<kRowVecs>(nrv, [&]<int kRv>(int64_t rv0) {
      values_bf16_rows<kRv, kHd>(w.ot, rp, p2, v2, hd, n_pairs, w.corr, rv0);
    });
  }
  prefill_write_out<S>(a, w.ot, w.lsum, rp);
}

template <KvDtype D>
void kv_prefill_block_bf16_hd(const detail::PrefillBlock& a) {
  switch (a.head_dim) {
    case 64:
      return kv_prefill_block_bf16<D, 64>(a);
    case 128:
      return kv_prefill_block_bf16<D, 128>(a);
    default:
      return kv_prefill_block_bf16<D, 0>(a);
  }
}

}  // namespace

namespace detail {

void attention_prefill_avx512_bf16(const PrefillBlock& a) {
  switch (a.dtype) {
    case KvDtype::kF32: return kv_prefill_block_bf16_hd<KvDtype::kF32>(a);
    case KvDtype::kBF16: return kv_prefill_block_bf16_hd<KvDtype::kBF16>(a);
    case KvDtype::kF8E4M3: return kv_prefill_block_bf16_hd<KvDtype::kF8E4M3>(a);
    case KvDtype::kI8: return kv_prefill_block_bf16_hd<KvDtype::kI8>(a);
    case KvDtype::kI4: return kv_prefill_block_bf16_hd<KvDtype::kI4>(a);
  }
}

}  // namespace detail
}  // namespace sampan::cpu
