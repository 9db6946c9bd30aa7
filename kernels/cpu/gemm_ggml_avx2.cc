// AVX2 kernels for GGUF block-type weights (contract in gemm_ggml.h): the fallback for CPUs
// without AVX-512 (or SAMPAN_CPU_ISA=avx2). The structure is gemm_ggml_avx512.cc's on 8-lane
// vectors: per block of each of the R rows a decoder turns the block's scales to f32 once, then
// yields 32 weights at a time as four f32 vectors, bit-identical to dequantize_ggml_row's:
//  - Q8_0: int8 -> f32, times d (exact).
//  - Q4_0: n - 8 in bytes, widened, times d (exact).
//  - Q4_K: n * (d sc) - dmin mn with one vfmsub (exact product: the reference's one rounding).
//  - Q6_K: the 6-bit codes assembled in bytes, minus 32, widened, times d * sc.
//  - Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS: nibbles (and qh bits, spread to bytes by a shuffle and
//    compare) assembled in bytes; IQ4 codebook by byte shuffle; then the f32 affine map.
//  - Q2_K, Q3_K, Q5_K: codes from 16-bit shifts and byte masks, widened, then (d sc) q (- dmin mn).
// AVX2 has 16 vector registers: R = 4 rows against at most 2 rows of x per pass (8 accumulators,
// 4 weight vectors); x is re-read from L1 per row. Decode of Q4_0, Q8_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K takes x rounded to 16 bits instead (the x16
// kernels, gemm_ggml_x16_avx2.cc; bound in gemm_ggml.h): the decoders here still dequantize those
// types for prefill.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_ggml_avx2.h"
#include "kernels/cpu/ggml_dequant.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kMaxM = 2;
static_assert(kMaxM <= kGgmlMaxM);

inline __m256 i8x8_to_f32(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}
inline __m256 u8x8_to_f32(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

// Weights w[0..3] = elements [0, 8), [8, 16), ... of the 32 returned per get32.
struct DecQ8_0 {
  static constexpr int kBlock = 32, kBytes = 34;
  const uint8_t* p;
  __m256 d;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(f16_at(b));
  }
  void get32(int /*c*/, __m256* w) const {
    const __m128i a = load16(p + 2), b = load16(p + 18);
    w[0] = _mm256_mul_ps(i8x8_to_f32(a), d);
    w[1] = _mm256_mul_ps(i8x8_to_f32(_mm_srli_si128(a, 8)), d);
    w[2] = _mm256_mul_ps(i8x8_to_f32(b), d);
    w[3] = _mm256_mul_ps(i8x8_to_f32(_mm_srli_si128(b, 8)), d);
  }
};

struct DecQ4_0 {
  static constexpr int kBlock = 32, kBytes = 18;
  const uint8_t* p;
  __m256 d;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(f16_at(b));
  }
  void get32(int /*c*/, __m256* w) const {
    // n - 8 in bytes, then d * (n - 8) as the reference (n * d - 8 d would turn its -0 into +0).
    const __m128i v = load16(p + 2), m = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, m), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), eight);
    w[0] = _mm256_mul_ps(i8x8_to_f32(lo), d);
    w[1] = _mm256_mul_ps(i8x8_to_f32(_mm_srli_si128(lo, 8)), d);
    w[2] = _mm256_mul_ps(i8x8_to_f32(hi), d);
    w[3] = _mm256_mul_ps(i8x8_to_f32(_mm_srli_si128(hi, 8)), d);
  }
};

// dl[j] = d * sc[j], ml[j] = dmin * mn[j] for the 8 sub-blocks of a Q4_K / Q5_K block.
inline void k_block_scales(const uint8_t* b, float* dl, float* ml) {
  uint64_t sc, mn;
  k_scales_min8(b + 4, &sc, &mn);
  const __m256 s =
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
  const __m256 m =
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn))));
  _mm256_storeu_ps(dl, _mm256_mul_ps(_mm256_set1_ps(f16_at(b)), s));
  _mm256_storeu_ps(ml, _mm256_mul_ps(_mm256_set1_ps(f16_at(b + 2)), m));
}

struct DecQ4_K {
  static constexpr int kBlock = 256, kBytes = 144;
  const uint8_t* p;
  float dl[8], ml[8];
  void begin(const uint8_t* b) {
    p = b;
    k_block_scales(b, dl, ml);
  }
  void get32(int c, __m256* w) const {
    const __m256 s = _mm256_set1_ps(dl[c]), m = _mm256_set1_ps(ml[c]);
    const uint8_t* q = p + 16 + 32 * (c / 2);
    __m128i a = load16(q), b = load16(q + 16);
    if (c & 1) {
      a = _mm_srli_epi16(a, 4);
      b = _mm_srli_epi16(b, 4);
    }
    a = _mm_and_si128(a, _mm_set1_epi8(0x0f));
    b = _mm_and_si128(b, _mm_set1_epi8(0x0f));
    w[0] = _mm256_fmsub_ps(u8x8_to_f32(a), s, m);
    w[1] = _mm256_fmsub_ps(u8x8_to_f32(_mm_srli_si128(a, 8)), s, m);
    w[2] = _mm256_fmsub_ps(u8x8_to_f32(b), s, m);
    w[3] = _mm256_fmsub_ps(u8x8_to_f32(_mm_srli_si128(b, 8)), s, m);
  }
};

struct DecQ6_K {
  static constexpr int kBlock = 256, kBytes = 210;
  const uint8_t* p;
  alignas(32) float dl[16];
  void begin(const uint8_t* b) {
    p = b;
    const __m256 d = _mm256_set1_ps(f16_at(b + 208));
    const __m128i sc = load16(b + 192);
    _mm256_store_ps(dl, _mm256_mul_ps(d, i8x8_to_f32(sc)));
    _mm256_store_ps(dl + 8, _mm256_mul_ps(d, i8x8_to_f32(_mm_srli_si128(sc, 8))));
  }
  void get32(int c, __m256* w) const {
    const __m256i q = q6_codes(p, c);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m256 s0 = _mm256_set1_ps(dl[2 * c]), s1 = _mm256_set1_ps(dl[2 * c + 1]);
    w[0] = _mm256_mul_ps(i8x8_to_f32(lo), s0);
    w[1] = _mm256_mul_ps(i8x8_to_f32(_mm_srli_si128(lo, 8)), s0);
    w[2] = _mm256_mul_ps(i8x8_to_f32(hi), s1);
    w[3] = _mm256_mul_ps(i8x8_to_f32(_mm_srli_si128(hi, 8)), s1);
  }
};

// Four f32 vectors of the 32 bytes of q (elements [0, 8), [8, 16), ...), signed or unsigned.
template <bool kSigned>
inline void widen32(__m256i q, __m256* w) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  if (kSigned) {
    w[0] = i8x8_to_f32(lo);
    w[1] = i8x8_to_f32(_mm_srli_si128(lo, 8));
    w[2] = i8x8_to_f32(hi);
    w[3] = i8x8_to_f32(_mm_srli_si128(hi, 8));
  } else {
    w[0] = u8x8_to_f32(lo);
    w[1] = u8x8_to_f32(_mm_srli_si128(lo, 8));
    w[2] = u8x8_to_f32(hi);
    w[3] = u8x8_to_f32(_mm_srli_si128(hi, 8));
  }
}

// The 32 nibbles of 16 bytes in element order (low nibbles are elements 0..15), as bytes.
inline __m256i nibbles32(const uint8_t* p) {
  const __m128i v = load16(p), m = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Byte l of the result is 0x10 where bit l of qh is set, else 0.
inline __m256i bits32_to_0x10(uint32_t qh) {
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

struct DecQ4_1 {
  static constexpr int kBlock = 32, kBytes = 20;
  const uint8_t* p;
  __m256 d, m;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(f16_at(b));
    m = _mm256_set1_ps(f16_at(b + 2));
  }
  void get32(int /*c*/, __m256* w) const {
    widen32<false>(nibbles32(p + 4), w);
    for (int q = 0; q < 4; ++q) w[q] = _mm256_fmadd_ps(w[q], d, m);  // d n exact: one rounding
  }
};

template <bool kMin>
struct DecQ5 {
  static constexpr int kBlock = 32, kBytes = kMin ? 24 : 22;
  static constexpr int kQh = kMin ? 4 : 2;
  const uint8_t* p;
  __m256 d, m;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(f16_at(b));
    m = _mm256_set1_ps(kMin ? f16_at(b + 2) : 0.0f);
  }
  void get32(int /*c*/, __m256* w) const {
    uint32_t qh;
    std::memcpy(&qh, p + kQh, 4);
    __m256i q = _mm256_or_si256(nibbles32(p + kQh + 4), bits32_to_0x10(qh));
    if (kMin) {
      widen32<false>(q, w);
      for (int i = 0; i < 4; ++i) w[i] = _mm256_fmadd_ps(w[i], d, m);
    } else {
      widen32<true>(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), w);
      for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(w[i], d);
    }
  }
};

// IQ4_NL / IQ4_XS: the codebook by byte shuffle, then d (or d ls) times it.
inline __m256i iq4_lookup(__m256i nib) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nib);
}

struct DecIQ4_NL {
  static constexpr int kBlock = 32, kBytes = 18;
  const uint8_t* p;
  __m256 d;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(f16_at(b));
  }
  void get32(int /*c*/, __m256* w) const {
    widen32<true>(iq4_lookup(nibbles32(p + 2)), w);
    for (int q = 0; q < 4; ++q) w[q] = _mm256_mul_ps(w[q], d);
  }
};

// MXFP4: the FP4 codebook by byte shuffle, then times the E8M0 scale (every product exact).
struct DecMXFP4 {
  static constexpr int kBlock = 32, kBytes = 17;
  const uint8_t* p;
  __m256 d;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(mxfp4_scale(b[0]));
  }
  void get32(int /*c*/, __m256* w) const {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
    widen32<true>(_mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles32(p + 1)), w);
    for (int q = 0; q < 4; ++q) w[q] = _mm256_mul_ps(w[q], d);
  }
};

// TQ2_0: 2-bit codes q, y = (q - 1) d; elements 32 c.. from bytes 32 (c / 4).., shift 2 (c % 4).
struct DecTQ2_0 {
  static constexpr int kBlock = 256, kBytes = 66;
  const uint8_t* p;
  __m256 d;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(f16_at(b + 64));
  }
  void get32(int c, __m256* w) const {
    const __m128i sh = _mm_cvtsi32_si128(2 * (c % 4));
    const uint8_t* q = p + 32 * (c / 4);
    for (int i = 0; i < 4; ++i) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * i)));
      const __m256i code = _mm256_and_si256(_mm256_srl_epi32(v, sh), _mm256_set1_epi32(3));
      w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(code, _mm256_set1_epi32(1))), d);
    }
  }
};

// TQ1_0: base-3 digits (ggml_dequant.h); the 96 elements of the block's tails, whose orders
// differ, are decoded once per block.
struct DecTQ1_0 {
  static constexpr int kBlock = 256, kBytes = 54;
  const uint8_t* p;
  __m256 d;
  alignas(32) float tail[96];
  void begin(const uint8_t* b) {
    p = b;
    d = _mm256_set1_ps(f16_at(b + 52));
    float full[256];
    dequantize_ggml_row(GgmlType::kTQ1_0, b, full, 256);
    std::memcpy(tail, full + 160, sizeof(tail));
  }
  void get32(int c, __m256* w) const {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    if (c >= 5) {
      for (int i = 0; i < 4; ++i) w[i] = _mm256_load_ps(tail + 32 * (c - 5) + 8 * i);
      return;
    }
    for (int i = 0; i < 4; ++i) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * i)));
      const __m256i q = _mm256_and_si256(_mm256_mullo_epi32(v, _mm256_set1_epi32(kPow3[c])),
                                         _mm256_set1_epi32(255));
      const __m256i t = _mm256_srli_epi32(_mm256_mullo_epi32(q, _mm256_set1_epi32(3)), 8);
      w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(t, _mm256_set1_epi32(1))), d);
    }
  }
};

struct DecIQ4_XS {
  static constexpr int kBlock = 256, kBytes = 136;
  const uint8_t* p;
  float dl[8];
  void begin(const uint8_t* b) {
    p = b;
    const float d = f16_at(b);
    const unsigned sh = b[2] | b[3] << 8;
    for (int j = 0; j < 8; ++j) {
      const int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
      const int ls = lo | static_cast<int>((sh >> (2 * j)) & 3) << 4;
      dl[j] = d * static_cast<float>(ls - 32);
    }
  }
  void get32(int c, __m256* w) const {
    widen32<true>(iq4_lookup(nibbles32(p + 8 + 16 * c)), w);
    const __m256 s = _mm256_set1_ps(dl[c]);
    for (int q = 0; q < 4; ++q) w[q] = _mm256_mul_ps(w[q], s);
  }
};

struct DecQ5_K {
  static constexpr int kBlock = 256, kBytes = 176;
  const uint8_t* p;
  float dl[8], ml[8];
  void begin(const uint8_t* b) {
    p = b;
    k_block_scales(b, dl, ml);
  }
  void get32(int c, __m256* w) const {
    const __m128i cnt = _mm_cvtsi32_si128(c);
    __m256i q = load32(p + 48 + 32 * (c / 2));
    if (c & 1) q = _mm256_srli_epi16(q, 4);
    q = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
    // Bit c of qh[l] to bit 4 (shifting 16-bit lanes: the neighbour's bits land above bit 0).
    const __m256i h = _mm256_and_si256(_mm256_srl_epi16(load32(p + 16), cnt), _mm256_set1_epi8(1));
    q = _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
    widen32<false>(q, w);
    const __m256 s = _mm256_set1_ps(dl[c]), m = _mm256_set1_ps(ml[c]);
    for (int i = 0; i < 4; ++i) w[i] = _mm256_fmsub_ps(w[i], s, m);  // exact product
  }
};

struct DecQ3_K {
  static constexpr int kBlock = 256, kBytes = 110;
  const uint8_t* p;
  float dl[16];
  void begin(const uint8_t* b) {
    p = b;
    const __m128i sc = q3_k_scales(b);
    const __m256 d = _mm256_set1_ps(f16_at(b + 108));
    _mm256_storeu_ps(dl, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(
        dl + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
  }
  void get32(int c, __m256* w) const {
    const int a = c / 4, s = c % 4;
    const __m256i ql = _mm256_and_si256(
        _mm256_srl_epi16(load32(p + 32 + 32 * a), _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    const __m256i h =
        _mm256_and_si256(_mm256_srl_epi16(load32(p), _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
    // q = ql - 4 + 4 h
    const __m256i q =
        _mm256_add_epi8(_mm256_sub_epi8(ql, _mm256_set1_epi8(4)), _mm256_slli_epi16(h, 2));
    widen32<true>(q, w);
    const __m256 s0 = _mm256_set1_ps(dl[2 * c]), s1 = _mm256_set1_ps(dl[2 * c + 1]);
    w[0] = _mm256_mul_ps(w[0], s0);
    w[1] = _mm256_mul_ps(w[1], s0);
    w[2] = _mm256_mul_ps(w[2], s1);
    w[3] = _mm256_mul_ps(w[3], s1);
  }
};

struct DecQ2_K {
  static constexpr int kBlock = 256, kBytes = 84;
  const uint8_t* p;
  float dl[16], ml[16];
  void begin(const uint8_t* b) {
    p = b;
    const __m256 d = _mm256_set1_ps(f16_at(b + 80)), dmin = _mm256_set1_ps(f16_at(b + 82));
    const __m128i v = load16(b), m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    for (int h = 0; h < 2; ++h) {
      const __m128i l = h ? _mm_srli_si128(lo, 8) : lo, u = h ? _mm_srli_si128(hi, 8) : hi;
      _mm256_storeu_ps(dl + 8 * h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(l))));
      _mm256_storeu_ps(ml + 8 * h,
                       _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u))));
    }
  }
  void get32(int c, __m256* w) const {
    const int a = c / 4, s = c % 4;
    const __m256i q = _mm256_and_si256(
        _mm256_srl_epi16(load32(p + 16 + 32 * a), _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    widen32<false>(q, w);
    for (int i = 0; i < 4; ++i) {
      const int j = 2 * c + i / 2;
      w[i] = _mm256_fmsub_ps(w[i], _mm256_set1_ps(dl[j]), _mm256_set1_ps(ml[j]));  // exact product
    }
  }
};

template <class Dec, int MB>
void dot_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, float* out) {
  constexpr int R = kRows;
  __m256 acc[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  Dec dec[R];
  const int64_t nb = k / Dec::kBlock;
  const int64_t ahead = prefetch_ahead(nb * Dec::kBytes);
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = rows[r] + b * Dec::kBytes;
      for (int off = 0; off < Dec::kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
      }
      dec[r].begin(p);
    }
    const float* xb = x + b * Dec::kBlock;
    for (int c = 0; c < Dec::kBlock / 32; ++c) {
      for (int r = 0; r < R; ++r) {
        __m256 w[4];
        dec[r].get32(c, w);
        for (int i = 0; i < MB; ++i) {
          for (int q = 0; q < 4; ++q) {
            const __m256 xv = _mm256_loadu_ps(xb + i * ldx + 32 * c + 8 * q);
            acc[i][r] = _mm256_fmadd_ps(xv, w[q], acc[i][r]);
          }
        }
      }
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) out[i * R + r] = hsum(acc[i][r]);
}

template <class Dec>
void dot(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb, float* out) {
  if (mb == 1) {
    dot_mb<Dec, 1>(rows, k, x, ldx, out);
  } else {
    dot_mb<Dec, 2>(rows, k, x, ldx, out);
  }
}

template <class Dec>
void dequant(const uint8_t* row, int64_t k, float* out) {
  Dec d;
  for (int64_t b = 0; b < k / Dec::kBlock; ++b) {
    d.begin(row + b * Dec::kBytes);
    for (int c = 0; c < Dec::kBlock / 32; ++c) {
      __m256 w[4];
      d.get32(c, w);
      for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + b * Dec::kBlock + 32 * c + 8 * q, w[q]);
    }
  }
}

template <class Dec>
void set(GgmlKernels& t, GgmlType type) {
  t.dot[static_cast<int>(type)] = {kRows, kMaxM, dot<Dec>};
  t.dequant[static_cast<int>(type)] = dequant<Dec>;
}

GgmlKernels make_table() {
  GgmlKernels t;
  set<DecQ8_0>(t, GgmlType::kQ8_0);
  set<DecQ4_0>(t, GgmlType::kQ4_0);
  set<DecQ4_K>(t, GgmlType::kQ4_K);
  set<DecQ6_K>(t, GgmlType::kQ6_K);
  set<DecQ4_1>(t, GgmlType::kQ4_1);
  set<DecQ5<false>>(t, GgmlType::kQ5_0);
  set<DecQ5<true>>(t, GgmlType::kQ5_1);
  set<DecQ2_K>(t, GgmlType::kQ2_K);
  set<DecQ3_K>(t, GgmlType::kQ3_K);
  set<DecQ5_K>(t, GgmlType::kQ5_K);
  set<DecIQ4_NL>(t, GgmlType::kIQ4_NL);
  set<DecIQ4_XS>(t, GgmlType::kIQ4_XS);
  set<DecMXFP4>(t, GgmlType::kMXFP4);
  set<DecTQ2_0>(t, GgmlType::kTQ2_0);
  set<DecTQ1_0>(t, GgmlType::kTQ1_0);
  set_x16_kernels_avx2(t);  // the x16 decode kernels (gemm_ggml_avx2.h lists the types)
  set_x8_kernels_avx2(t);   // and the x8 ones (kBf16)
  t.epilogue = fma_kernels_avx2().epilogue;
  return t;
}

}  // namespace

const GgmlKernels& ggml_kernels_avx2() {
  static const GgmlKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
