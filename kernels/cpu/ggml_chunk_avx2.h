// GGUF blocks as unsigned bytes, 32 elements at a time (AVX2): the kinds of block the integer
// kernels take (GgmlKind), each one's layout as w = s_w (u - kOff) - mn (GgmlLayout), and the
// bytes u of a 32-element chunk (ggml_chunk_u8). Used by the integer prefill
// (gemm_prefill_int_common.h) and the AVX2 decode kernels (gemm_ggml_x8_avx2.cc, and the x16
// ones of gemm_ggml_x16_avx2.cc for Q5_1 / IQ4_NL / IQ4_XS); the block layouts are
// ggml_dequant.h's.
//
// Internal linkage (an unnamed namespace): include only from translation units compiled with
// AVX2 at least; each compiles its own copy with its own flags.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/ggml_dequant.h"

namespace sampan::cpu::gemm_detail {
namespace {

// The GGUF kinds of the integer kernels, each a weight w = s_w (u - kOff) - mn per group of
// kGroup elements with u an unsigned byte (ggml_chunk_u8), s_w and mn exact in f32
// (gemm_prefill_int_common.h: ggml_scales). Q4_0: u = n, off 8. Q8_0: u = q + 128. Q4_1 /
// Q5_1: u = n (Q5: with the fifth bit h from qh), s_w = d, mn = -m. Q5_0: off 16. IQ4_NL /
// IQ4_XS: u = kv[n] + 128 (the codebook by a byte shuffle), off 128; IQ4_XS's s_w = d (ls - 32)
// per 32 (11 + 6 bits). Q2_K: groups of 16, u = q (2 bits), s_w = d (sc & 15), mn = dmin (sc >>
// 4). Q3_K: groups of 16, u = q + 4 with the hmask bit as bit 2 (q in -4..3), off 4, s_w = d
// (sc - 32) (11 + 6 bits). Q4_K: 8 groups of 32 (sub-block j: nibble j % 2 of bytes 32 (j /
// 2).. of qs), s_w = d sc_j, mn = dmin mn_j (11 + 6 bits each). Q5_K: as Q4_K with a fifth bit
// from qh. Q6_K: 16 groups of 16, s_w = d sc_j (sc_j int8), u from 4 low bits of ql and 2 high
// bits of qh, off 32.
enum class GgmlKind { kQ4_0, kQ8_0, kQ4_K, kQ5_K, kQ6_K, kQ4_1, kQ5_0, kQ5_1, kIQ4_NL, kIQ4_XS,
                      kQ2_K, kQ3_K };

template <GgmlKind kKind>
struct GgmlLayout {
  static constexpr bool kQ8 = kKind == GgmlKind::kQ8_0, kQ5K = kKind == GgmlKind::kQ5_K;
  static constexpr bool kQ4K = kKind == GgmlKind::kQ4_K || kQ5K;  // scales and mins as Q4_K's
  static constexpr bool kQ6K = kKind == GgmlKind::kQ6_K;
  static constexpr bool kQ2K = kKind == GgmlKind::kQ2_K, kQ3K = kKind == GgmlKind::kQ3_K;
  static constexpr bool kIq4Xs = kKind == GgmlKind::kIQ4_XS;
  static constexpr bool kIq4 = kIq4Xs || kKind == GgmlKind::kIQ4_NL;  // codes through kIq4Values
  static constexpr bool kQ4_1 = kKind == GgmlKind::kQ4_1, kQ5_1 = kKind == GgmlKind::kQ5_1;
  static constexpr bool kQ5 = kQ5_1 || kKind == GgmlKind::kQ5_0;  // Q5_0 / Q5_1: qh's bits
  static constexpr bool kK = kQ4K || kQ6K || kQ2K || kQ3K || kIq4Xs;  // 256-element blocks
  static constexpr int64_t kBytes = kQ6K     ? 210
                                    : kQ5K   ? 176
                                    : kQ4K   ? 144
                                    : kIq4Xs ? 136
                                    : kQ3K   ? 110
                                    : kQ2K   ? 84
                                    : kQ8    ? 34
                                    : kQ5_1  ? 24
                                    : kQ5    ? 22
                                    : kQ4_1  ? 20
                                             : 18;  // Q4_0, IQ4_NL
  static constexpr int64_t kBlock = kK ? 256 : 32;  // elements per block
  static constexpr int64_t kGroup = kQ6K || kQ2K || kQ3K ? 16 : 32;  // elements per s_w
  static constexpr bool kMins = kQ4K || kQ4_1 || kQ5_1 || kQ2K;     // mn != 0
  // w = s_w (u - kOff) (- mn) for u the unsigned byte of ggml_chunk_u8.
  static constexpr int kOff = kQ8 || kIq4  ? 128
                              : kQ6K       ? 32
                              : kQ5 && !kQ5_1 ? 16
                              : kQ3K       ? 4
                              : kKind == GgmlKind::kQ4_0 ? 8
                                                         : 0;
  // The largest u (kv[15] + 128 = 241 for the codebooks).
  static constexpr int kMaxU = kQ8 ? 255 : kIq4 ? 241 : kQ6K ? 63 : kQ5K || kQ5 ? 31
                               : kQ3K ? 7 : kQ2K ? 3 : 15;
};

// The 16 bytes at p as 32 nibbles in element order (low nibbles first), one per byte: the bytes
// in both 128-bit lanes (a broadcast load), the upper lane shifted by 4 (one vpsrlvd), masked.
inline __m256i nibbles_u8(const uint8_t* p) {
  const __m256i v =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                          _mm256_set1_epi8(0x0f));
}

// The codebook values kIq4Values[n] (signed bytes) of the 32 nibbles at qs, in element order.
inline __m256i iq4_values_i8(const uint8_t* qs) {
  const __m256i kv =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
  return _mm256_shuffle_epi8(kv, nibbles_u8(qs));
}

// The 32 elements of chunk cb (of kBlock / 32) of block blk as the unsigned bytes u of
// GgmlLayout (w = s_w (u - kOff) - mn).
template <GgmlKind kKind>
inline __m256i ggml_chunk_u8(const uint8_t* blk, int64_t cb) {
  using L = GgmlLayout<kKind>;
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03);
  if constexpr (L::kQ4K) {
    const __m256i bytes = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(blk + (L::kQ5K ? 48 : 16) + 32 * (cb / 2)));
    __m256i q = _mm256_and_si256(cb % 2 ? _mm256_srli_epi16(bytes, 4) : bytes, low4);
    if constexpr (L::kQ5K) {  // bit cb of qh[l] is bit 4 of element 32 cb + l
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      q = _mm256_or_si256(
          q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi64_si128(cb)),
                                                _mm256_set1_epi8(0x01)),
                               4));
    }
    return q;
  } else if constexpr (L::kQ6K) {
    const int64_t a = cb / 4, t = cb % 4;
    const __m256i lo =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * a + 32 * (t & 1)));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * a));
    // 16-bit shifts: each byte's bits that the masks keep come from that byte.
    return _mm256_or_si256(
        _mm256_and_si256(_mm256_srl_epi16(lo, _mm_cvtsi64_si128(4 * (t >> 1))), low4),
        _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi64_si128(2 * t)), low2),
                          4));
  } else if constexpr (L::kQ2K || L::kQ3K) {
    // Element 128 a + 32 t + l: bits 2 t of byte 32 a + l of qs (Q2_K: at 16; Q3_K: at 32),
    // Q3_K's third bit bit cb of hmask[l].
    const __m256i qs = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(blk + (L::kQ2K ? 16 : 32) + 32 * (cb / 4)));
    const __m256i q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi64_si128(2 * (cb % 4))), low2);
    if constexpr (L::kQ2K) {
      return q;
    } else {
      const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
      const __m256i h = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi64_si128(cb)),
                                         _mm256_set1_epi8(0x01));
      return _mm256_or_si256(q, _mm256_slli_epi16(h, 2));
    }
  } else if constexpr (L::kIq4) {
    // kv[n] + 128 for the 16 codes, in both lanes of the byte shuffle.
    const __m128i kv = _mm_xor_si128(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)), _mm_set1_epi8(-128));
    const uint8_t* qs = L::kIq4Xs ? blk + 8 + 16 * cb : blk + 2;
    return _mm256_shuffle_epi8(_mm256_set_m128i(kv, kv), nibbles_u8(qs));
  } else if constexpr (L::kQ8) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  } else if constexpr (L::kQ5) {
    // Bit e of the u32 qh is element e's fifth bit: byte e / 8 of qh to bytes 8 (e / 8) ..,
    // then each byte's own bit e % 8 tested.
    float qh;  // its 4 bytes in every lane by one load (vbroadcastss)
    std::memcpy(&qh, blk + (L::kQ5_1 ? 4 : 2), 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_castps_si256(_mm256_set1_ps(qh)),
        _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                                       _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles_u8(blk + (L::kQ5_1 ? 8 : 6)), h);
  } else {
    return nibbles_u8(blk + (L::kQ4_1 ? 4 : 2));  // Q4_0, Q4_1
  }
}

}  // namespace
}  // namespace sampan::cpu::gemm_detail
