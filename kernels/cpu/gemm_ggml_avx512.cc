// AVX-512 kernels for GGUF block-type weights (contract in gemm_ggml.h).
//
// One dot-kernel template runs every type: per block of each of the R rows a decoder is set up
// (scales of the block, turned to f32 once), then yields the block 32 elements at a time as two
// vectors of f32 weights, which meet the m rows of x (loaded once per 32 elements). The decoders
// repeat the reference's f32 operations (ggml_dequant.h) exactly, so the weights are
// bit-identical to dequantize_ggml_row's:
//  - Q8_0: int8 -> f32, times d (exact: 8 x 11 bits).
//  - Q4_0: a 16-entry table (n - 8) * d per block (exact), indexed by the nibbles with vpermps
//    (which reads only the low 4 bits of each index, so the low nibble needs no mask).
//  - Q4_K: per 32-element sub-block a table n * (d sc) - dmin mn (one vfmsub: the product is
//    exact, so the single rounding is the reference's rounding of the subtraction).
//  - Q6_K: the 6-bit codes are assembled in bytes (32 at a time in a 256-bit register), minus
//    32, widened to f32 and multiplied by d * sc (the reference's two roundings).
//  - Q4_1, IQ4_NL, IQ4_XS: 16-entry tables as Q4_0 (d n + m; d kv; (d ls) kv per sub-block).
//  - Q5_0, Q5_1, Q5_K: 32-entry tables in two registers (vpermt2ps), the fifth index bit set
//    from qh with a mask register.
//  - Q2_K, Q3_K: 2-bit codes from 16-bit shifts and masks (Q3_K: minus 4 where the hmask bit is
//    clear, under a mask register), widened, then (d sc) q (- dmin mn).
// These decoders also dequantize whole rows for prefill (`dequant`), bit for bit the reference.
//
// Decode of Q4_K and Q5_K instead takes x rounded to 16 bits per 256 elements (the x16 kernels,
// error bound in gemm_ggml.h) and multiplies in integers: the f32 decoders spend a table build
// and two vpermps per 16 weights there, and measured (Zen 4, 1 thread, weights in cache, thread
// CPU time, bench_gemm_ggml --cached --cpu-time) 7-9 GB/s for Q4_K and 5-7 for Q5_K against
// 11-14 and 11-14 for the x16 kernels, while a core reads ~11 GB/s from DRAM. For Q6_K the same
// scheme measured no faster than its f32 decoder (the 6-bit code assembly dominates; decode of
// Q6_K now runs the AVX2 x16 kernel, which measured 1.56x this decoder on Emerald Rapids), and for
// Q4_0 / Q8_0 the f32 decoders already compute 11-19 GB/s; their x16 pair kernels (below)
// measured 1.05-1.15x the f32 ones at 2 threads from DRAM (m = 1), so decode uses them. x is rounded
// to 16 bits, not to llama.cpp's 8 (2^-8 relative): the codes are widened to 16-bit lanes for
// the scale multiply anyway, so int16 x (vpmaddwd) costs no more operations than int8 would.
// On AVX512-VNNI, Q4_K and Q5_K decode runs gemm_ggml_q4k_avx512_vnni.cc's kernels instead (the
// codes kept as bytes, x16 as two int8 planes: 1.7-1.8x this x16 kernel on Zen 5).
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized; silenced before the header is read (as in gemm_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_ggml_avx512.h"
#include "kernels/cpu/ggml_block_fields.h"
#include "kernels/cpu/ggml_dequant.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kRows = 4;  // R
constexpr int kMaxM = 4;  // rows of x per pass: 4 x 4 accumulators, 8 x vectors, 2 weights
static_assert(kRows <= kGgmlMaxRows && kMaxM <= kGgmlMaxM);
// Elements [0, 16) and [16, 32) of 32 signed bytes, as f32 times dl0 and dl1.
inline void i8x32_to_f32(__m256i q, __m512 dl0, __m512 dl1, __m512& w0, __m512& w1) {
  w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), dl0);
  w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), dl1);
}

// ---- Decoders: begin(block) then get32(c) for c < kBlock / 32 ----

struct DecQ8_0 {
  static constexpr int kBlock = 32, kBytes = 34;
  const uint8_t* p;
  __m512 d;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm512_set1_ps(f16_at(b));
  }
  void get32(int /*c*/, __m512& w0, __m512& w1) const {
    w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(p + 2))), d);
    w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(p + 18))), d);
  }
};

struct DecQ4_0 {
  static constexpr int kBlock = 32, kBytes = 18;
  const uint8_t* p;
  __m512 lut;
  void begin(const uint8_t* b) {
    p = b;
    const __m512 q = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    lut = _mm512_mul_ps(q, _mm512_set1_ps(f16_at(b)));
  }
  void get32(int /*c*/, __m512& w0, __m512& w1) const {
    const __m512i v = _mm512_cvtepu8_epi32(load16(p + 2));  // elements 0..15: low nibbles
    w0 = _mm512_permutexvar_ps(v, lut);
    w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
  }
};

// dl[j] = d * sc[j], ml[j] = dmin * mn[j] for the 8 sub-blocks of a Q4_K / Q5_K block.
inline void k_block_scales(const uint8_t* b, float* dl, float* ml) {
  uint64_t sc, mn;
  k_scales_min8(b + 4, &sc, &mn);
  _mm256_storeu_ps(dl, k_block_factors(b, 0, sc));
  _mm256_storeu_ps(ml, k_block_factors(b, 2, mn));
}

struct DecQ4_K {
  static constexpr int kBlock = 256, kBytes = 144;
  const uint8_t* p;
  float dl[8], ml[8];
  void begin(const uint8_t* b) {
    p = b;
    k_block_scales(b, dl, ml);
  }
  // Sub-block c: the low (c even) or high nibbles of the 32 bytes qs[32 (c / 2), +32).
  void get32(int c, __m512& w0, __m512& w1) const {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 lut = _mm512_fmsub_ps(iota, _mm512_set1_ps(dl[c]), _mm512_set1_ps(ml[c]));
    const uint8_t* q = p + 16 + 32 * (c / 2);
    __m512i v0 = _mm512_cvtepu8_epi32(load16(q)), v1 = _mm512_cvtepu8_epi32(load16(q + 16));
    if (c & 1) {
      v0 = _mm512_srli_epi32(v0, 4);
      v1 = _mm512_srli_epi32(v1, 4);
    }
    w0 = _mm512_permutexvar_ps(v0, lut);
    w1 = _mm512_permutexvar_ps(v1, lut);
  }
};

// 32 six-bit codes minus 32, as signed bytes: elements 32 c .. 32 c + 31 of a Q6_K block p.
inline __m256i q6_codes(const uint8_t* p, int c) {
  const int a = c / 4, s = c % 4;
  __m256i lo = load32(p + 64 * a + 32 * (s & 1));
  if (s >> 1) lo = _mm256_srli_epi16(lo, 4);
  lo = _mm256_and_si256(lo, _mm256_set1_epi8(0x0f));
  // Bits 2s, 2s+1 of qh to bits 4, 5. 16-bit shifts move bits across the byte boundary only
  // below bit 4 (left shifts by <= 4) or into bits 6, 7 (right shift by 2): the mask drops them.
  __m256i hi = load32(p + 128 + 32 * a);
  hi = s == 3 ? _mm256_srli_epi16(hi, 2) : _mm256_sll_epi16(hi, _mm_cvtsi32_si128(4 - 2 * s));
  hi = _mm256_and_si256(hi, _mm256_set1_epi8(0x30));
  return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
}

struct DecQ6_K {
  static constexpr int kBlock = 256, kBytes = 210;
  const uint8_t* p;
  alignas(64) float dl[16];
  void begin(const uint8_t* b) {
    p = b;
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(b + 192)));
    _mm512_store_ps(dl, _mm512_mul_ps(_mm512_set1_ps(f16_at(b + 208)), sc));
  }
  void get32(int c, __m512& w0, __m512& w1) const {
    i8x32_to_f32(q6_codes(p, c), _mm512_set1_ps(dl[2 * c]), _mm512_set1_ps(dl[2 * c + 1]), w0, w1);
  }
};

// Q4_1 and IQ4_NL: 32 elements, f16 d (and m) then 16 bytes of nibbles: one 16-entry table.
struct DecQ4_1 {
  static constexpr int kBlock = 32, kBytes = 20;
  const uint8_t* p;
  __m512 lut;
  void begin(const uint8_t* b) {
    p = b;
    const __m512 n = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    // d * n is exact: the one rounding is the reference's of + m.
    lut = _mm512_fmadd_ps(n, _mm512_set1_ps(f16_at(b)), _mm512_set1_ps(f16_at(b + 2)));
  }
  void get32(int /*c*/, __m512& w0, __m512& w1) const {
    const __m512i v = _mm512_cvtepu8_epi32(load16(p + 4));
    w0 = _mm512_permutexvar_ps(v, lut);
    w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
  }
};

inline __m512 iq4_values() {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values))));
}

struct DecIQ4_NL {
  static constexpr int kBlock = 32, kBytes = 18;
  const uint8_t* p;
  __m512 lut;
  void begin(const uint8_t* b) {
    p = b;
    lut = _mm512_mul_ps(iq4_values(), _mm512_set1_ps(f16_at(b)));
  }
  void get32(int /*c*/, __m512& w0, __m512& w1) const {
    const __m512i v = _mm512_cvtepu8_epi32(load16(p + 2));
    w0 = _mm512_permutexvar_ps(v, lut);
    w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
  }
};

// MXFP4: IQ4_NL's table with its own codebook and an E8M0 scale (every product exact).
struct DecMXFP4 {
  static constexpr int kBlock = 32, kBytes = 17;
  const uint8_t* p;
  __m512 lut;
  void begin(const uint8_t* b) {
    p = b;
    const __m512 kv = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values))));
    lut = _mm512_mul_ps(kv, _mm512_set1_ps(mxfp4_scale(b[0])));
  }
  void get32(int /*c*/, __m512& w0, __m512& w1) const {
    const __m512i v = _mm512_cvtepu8_epi32(load16(p + 1));
    w0 = _mm512_permutexvar_ps(v, lut);
    w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
  }
};

// TQ2_0: 2-bit codes q, y = (q - 1) d. Elements 32 c.. of the block: bytes 32 (c / 4).., shift
// 2 (c % 4).
struct DecTQ2_0 {
  static constexpr int kBlock = 256, kBytes = 66;
  const uint8_t* p;
  __m512 d;
  void begin(const uint8_t* b) {
    p = b;
    d = _mm512_set1_ps(f16_at(b + 64));
  }
  void get32(int c, __m512& w0, __m512& w1) const {
    const __m128i sh = _mm_cvtsi32_si128(2 * (c % 4));
    const __m512i three = _mm512_set1_epi32(3), one = _mm512_set1_epi32(1);
    const uint8_t* q = p + 32 * (c / 4);
    const __m512i a = _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(load16(q)), sh), three);
    const __m512i b =
        _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(load16(q + 16)), sh), three);
    w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a, one)), d);
    w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(b, one)), d);
  }
};

// TQ1_0: base-3 digits (ggml_dequant.h). Elements 0..159 (digit c of qs[0..31]) in vectors; the
// 96 of the 16-byte and 4-byte tails, with their mixed orders, decoded once per block.
struct DecTQ1_0 {
  static constexpr int kBlock = 256, kBytes = 54;
  const uint8_t* p;
  __m512 d;
  alignas(64) float tail[96];
  static __m512 trits(__m512i v, int n, __m512 d) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    const __m512i q = _mm512_and_si512(_mm512_mullo_epi32(v, _mm512_set1_epi32(kPow3[n])),
                                       _mm512_set1_epi32(255));
    const __m512i t = _mm512_srli_epi32(_mm512_mullo_epi32(q, _mm512_set1_epi32(3)), 8);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(t, _mm512_set1_epi32(1))), d);
  }
  void begin(const uint8_t* b) {
    p = b;
    const float df = f16_at(b + 52);
    d = _mm512_set1_ps(df);
    float full[256];
    dequantize_ggml_row(GgmlType::kTQ1_0, b, full, 256);
    std::memcpy(tail, full + 160, sizeof(tail));
  }
  void get32(int c, __m512& w0, __m512& w1) const {
    if (c < 5) {
      w0 = trits(_mm512_cvtepu8_epi32(load16(p)), c, d);
      w1 = trits(_mm512_cvtepu8_epi32(load16(p + 16)), c, d);
    } else {
      w0 = _mm512_load_ps(tail + 32 * (c - 5));
      w1 = _mm512_load_ps(tail + 32 * (c - 5) + 16);
    }
  }
};

struct DecIQ4_XS {
  static constexpr int kBlock = 256, kBytes = 136;
  const uint8_t* p;
  __m512 kv;
  float dl[8];
  void begin(const uint8_t* b) {
    p = b;
    kv = iq4_values();
    const float d = f16_at(b);
    const unsigned sh = b[2] | b[3] << 8;
    for (int j = 0; j < 8; ++j) {
      const int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
      const int ls = lo | static_cast<int>((sh >> (2 * j)) & 3) << 4;
      dl[j] = d * static_cast<float>(ls - 32);
    }
  }
  void get32(int c, __m512& w0, __m512& w1) const {
    const __m512 lut = _mm512_mul_ps(kv, _mm512_set1_ps(dl[c]));
    const __m512i v = _mm512_cvtepu8_epi32(load16(p + 8 + 16 * c));
    w0 = _mm512_permutexvar_ps(v, lut);
    w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
  }
};

// Q5_0 / Q5_1: a 32-entry table (two registers, vpermt2ps) indexed by nibble | high bit << 4;
// the high bits of elements 0..15 and 16..31 are the low and high halves of qh, used as masks.
template <bool kMin>
struct DecQ5 {
  static constexpr int kBlock = 32, kBytes = kMin ? 24 : 22;
  static constexpr int kQh = kMin ? 4 : 2;
  const uint8_t* p;
  __m512 lut_a, lut_b;
  uint32_t qh;
  void begin(const uint8_t* b) {
    p = b;
    const __m512 n = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 d = _mm512_set1_ps(f16_at(b)), sixteen = _mm512_set1_ps(16.0f);
    if (kMin) {  // d * q exact, then the reference's rounding of + m
      const __m512 m = _mm512_set1_ps(f16_at(b + 2));
      lut_a = _mm512_fmadd_ps(n, d, m);
      lut_b = _mm512_fmadd_ps(_mm512_add_ps(n, sixteen), d, m);
    } else {  // d * (q - 16), exact
      lut_a = _mm512_mul_ps(_mm512_sub_ps(n, sixteen), d);
      lut_b = _mm512_mul_ps(n, d);
    }
    std::memcpy(&qh, b + kQh, 4);
  }
  void get32(int /*c*/, __m512& w0, __m512& w1) const {
    const __m512i v = _mm512_cvtepu8_epi32(load16(p + kQh + 4));
    const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(v, 4);
    const __m512i sixteen = _mm512_set1_epi32(16);
    const __m512i i0 = _mm512_mask_add_epi32(lo, static_cast<__mmask16>(qh), lo, sixteen);
    const __m512i i1 = _mm512_mask_add_epi32(hi, static_cast<__mmask16>(qh >> 16), hi, sixteen);
    w0 = _mm512_permutex2var_ps(lut_a, i0, lut_b);
    w1 = _mm512_permutex2var_ps(lut_a, i1, lut_b);
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
  void get32(int c, __m512& w0, __m512& w1) const {
    const __m512 n = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 s = _mm512_set1_ps(dl[c]), m = _mm512_set1_ps(ml[c]);
    const __m512 lut_a = _mm512_fmsub_ps(n, s, m);
    const __m512 lut_b = _mm512_fmsub_ps(_mm512_add_ps(n, _mm512_set1_ps(16.0f)), s, m);
    const uint8_t* q = p + 48 + 32 * (c / 2);
    __m512i v0 = _mm512_cvtepu8_epi32(load16(q)), v1 = _mm512_cvtepu8_epi32(load16(q + 16));
    if (c & 1) {
      v0 = _mm512_srli_epi32(v0, 4);
      v1 = _mm512_srli_epi32(v1, 4);
    } else {
      v0 = _mm512_and_si512(v0, _mm512_set1_epi32(15));
      v1 = _mm512_and_si512(v1, _mm512_set1_epi32(15));
    }
    // Bit c of qh[l] is the high bit of element 32 c + l.
    const __mmask32 h =
        _mm256_test_epi8_mask(load32(p + 16), _mm256_set1_epi8(static_cast<char>(1 << c)));
    const __m512i sixteen = _mm512_set1_epi32(16);
    v0 = _mm512_mask_add_epi32(v0, static_cast<__mmask16>(h), v0, sixteen);
    v1 = _mm512_mask_add_epi32(v1, static_cast<__mmask16>(h >> 16), v1, sixteen);
    w0 = _mm512_permutex2var_ps(lut_a, v0, lut_b);
    w1 = _mm512_permutex2var_ps(lut_a, v1, lut_b);
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
  void get32(int c, __m512& w0, __m512& w1) const {
    const int a = c / 4, s = c % 4;
    // 16-bit shifts bring bits of the neighbouring byte only into bits >= 2: masked off.
    const __m256i ql = _mm256_and_si256(
        _mm256_srl_epi16(load32(p + 32 + 32 * a), _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    const __mmask32 h =
        _mm256_test_epi8_mask(load32(p), _mm256_set1_epi8(static_cast<char>(1 << c)));
    const __m256i q = _mm256_mask_sub_epi8(ql, ~h, ql, _mm256_set1_epi8(4));
    i8x32_to_f32(q, _mm512_set1_ps(dl[2 * c]), _mm512_set1_ps(dl[2 * c + 1]), w0, w1);
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
  void get32(int c, __m512& w0, __m512& w1) const {
    const int a = c / 4, s = c % 4;
    const __m256i q = _mm256_and_si256(
        _mm256_srl_epi16(load32(p + 16 + 32 * a), _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    // q * dl is exact: the one rounding is the reference's of - ml.
    const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)));
    const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)));
    w0 = _mm512_fmsub_ps(q0, _mm512_set1_ps(dl[2 * c]), _mm512_set1_ps(ml[2 * c]));
    w1 = _mm512_fmsub_ps(q1, _mm512_set1_ps(dl[2 * c + 1]), _mm512_set1_ps(ml[2 * c + 1]));
  }
};

// ---- The dot kernel ----

template <class Dec, int MB>
void dot_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, float* out) {
  constexpr int R = kRows;
  __m512 acc[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
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
      __m512 x0[MB], x1[MB];
      for (int i = 0; i < MB; ++i) {
        x0[i] = _mm512_loadu_ps(xb + i * ldx + 32 * c);
        x1[i] = _mm512_loadu_ps(xb + i * ldx + 32 * c + 16);
      }
      for (int r = 0; r < R; ++r) {
        __m512 w0, w1;
        dec[r].get32(c, w0, w1);
        for (int i = 0; i < MB; ++i) {
          acc[i][r] = _mm512_fmadd_ps(x0[i], w0, acc[i][r]);
          acc[i][r] = _mm512_fmadd_ps(x1[i], w1, acc[i][r]);
        }
      }
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) out[i * R + r] = _mm512_reduce_add_ps(acc[i][r]);
}

template <class Dec>
void dot(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb, float* out) {
  switch (mb) {
    case 1: return dot_mb<Dec, 1>(rows, k, x, ldx, out);
    case 2: return dot_mb<Dec, 2>(rows, k, x, ldx, out);
    case 3: return dot_mb<Dec, 3>(rows, k, x, ldx, out);
    default: return dot_mb<Dec, 4>(rows, k, x, ldx, out);
  }
}

// ---- Q4_K and Q5_K with x rounded to 16 bits (the x16 kernels of gemm_ggml.h) ----
//
// Per 256-element block of x, prepared once per call: x16 = round(x / s) (int16, element order),
// s = absmax / 32767, and the f32 sums s * sum x16 of each 32-element sub-block. A Q4_K block's
// dot product is then d s * sum_j sc_j sum_l q x16 - sum_j (dmin mn_j) (s sum x16)_j: the
// weights are widened to int16 once, multiplied by their 6-bit scale (q sc <= 945) and
// vpmaddwd'ed with x16 into int32 lanes for the whole block (at most 8 * 2 * 945 * 32767 <
// 2^31), converted to f32 once per block. Per 64 weights about 12 vector operations where the
// f32 decoder needs about 22: measured (1 thread, weights in cache) 1.6x the f32 kernel's speed.
constexpr int64_t kX16BlockFloats = 144;  // 128 (256 int16) + 8 sums + scale + 7 zero
static_assert(kX16BlockFloats == kGgmlX16BlockFloats && kGgmlX16ScaleAt == 136);

int64_t x16_floats(int64_t k) {
  return k / 256 * kX16BlockFloats;
}

void prep_x16(const float* x, int64_t k, float* out) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + 256 * b;
    float* o = out + b * kX16BlockFloats;
    // A block with an inf or NaN: inv = 0, s = NaN, so its outputs come out NaN.
    float sx, inv;
    block_x_scale(xb, 256, 32767.0f, &sx, &inv);
    int16_t* q = reinterpret_cast<int16_t*>(o);
    for (int j = 0; j < 8; ++j) {
      __m512i sum = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const int c = 32 * j + 16 * h;
        const __m512i v =
            _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + c), _mm512_set1_ps(inv)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c), _mm512_cvtsepi32_epi16(v));
        sum = _mm512_add_epi32(sum, v);
      }
      o[128 + j] = sx * static_cast<float>(_mm512_reduce_add_epi32(sum));  // |sum| < 2^24
    }
    o[136] = sx;
    for (int j = 137; j < kX16BlockFloats; ++j) o[j] = 0.0f;
  }
}

// acc += the pairwise int16 products of a and b: vpdpwssd where the CPU has AVX512-VNNI (kVnni:
// one instruction for vpmaddwd + vpaddd; in asm, as this file is compiled without the VNNI
// flag and the kernel runs only where isa.h reports it).
template <bool kVnni>
inline void madd_add(__m512i& acc, __m512i a, __m512i b) {
  if constexpr (kVnni) {
    asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  } else {
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
  }
}

// kQ5: Q5_K, whose fifth bit (bit j of qh[l] for element 32 j + l) adds 16 to the code.
template <bool kQ5, int MB, bool kVnni>
void dot_k_x16_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, float* out) {
  constexpr int kBytes = kQ5 ? 176 : 144, kQs = kQ5 ? 48 : 16;
  const __m512i low4 = _mm512_set1_epi16(15);
  over_blocks<kRows, MB, kBytes>(rows, k, out, [&](int64_t b, const uint8_t* p, __m512(&acc)[MB]) {
    uint64_t sc, mn;
    k_scales_min8(p + 4, &sc, &mn);
    const float d = f16_at(p);
    const __m256 ml = k_block_factors(p, 2, mn);
    __m512i ai[MB];
    for (int i = 0; i < MB; ++i) ai[i] = _mm512_setzero_si512();
    for (int c2 = 0; c2 < 4; ++c2) {
      const __m512i v = _mm512_cvtepu8_epi16(load32(p + kQs + 32 * c2));
      __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_srli_epi16(v, 4);
      if (kQ5) {
        const __m256i qh = load32(p + 16);
        const __m512i sixteen = _mm512_set1_epi16(16);
        const __mmask32 h0 =
            _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c2))));
        const __mmask32 h1 =
            _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(2 << (2 * c2))));
        lo = _mm512_mask_add_epi16(lo, h0, lo, sixteen);
        hi = _mm512_mask_add_epi16(hi, h1, hi, sixteen);
      }
      // q sc <= 31 * 63 = 1953: int16, and a block's lanes stay below 8 * 2 * 1953 * 32767 <
      // 2^31.
      lo = _mm512_mullo_epi16(lo,
                              _mm512_set1_epi16(static_cast<int16_t>((sc >> (16 * c2)) & 0xff)));
      hi = _mm512_mullo_epi16(
          hi, _mm512_set1_epi16(static_cast<int16_t>((sc >> (16 * c2 + 8)) & 0xff)));
      for (int i = 0; i < MB; ++i) {
        const int16_t* xq = reinterpret_cast<const int16_t*>(x + i * ldx + b * kX16BlockFloats);
        madd_add<kVnni>(ai[i], lo, _mm512_loadu_si512(xq + 64 * c2));
        madd_add<kVnni>(ai[i], hi, _mm512_loadu_si512(xq + 64 * c2 + 32));
      }
    }
    for (int i = 0; i < MB; ++i) {
      const float* xb = x + i * ldx + b * kX16BlockFloats;
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[i]), _mm512_set1_ps(d * xb[136]), acc[i]);
      acc[i] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(ml),
                                _mm512_zextps256_ps512(_mm256_loadu_ps(xb + 128)), acc[i]);
    }
  });
}

template <bool kQ5, bool kVnni>
void dot_k_x16_v(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb,
                 float* out) {
  switch (mb) {
    case 1: return dot_k_x16_mb<kQ5, 1, kVnni>(rows, k, x, ldx, out);
    case 2: return dot_k_x16_mb<kQ5, 2, kVnni>(rows, k, x, ldx, out);
    case 3: return dot_k_x16_mb<kQ5, 3, kVnni>(rows, k, x, ldx, out);
    default: return dot_k_x16_mb<kQ5, 4, kVnni>(rows, k, x, ldx, out);
  }
}

template <bool kQ5>
void dot_k_x16(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb,
               float* out) {
  if (has_avx512_vnni()) return dot_k_x16_v<kQ5, true>(rows, k, x, ldx, mb, out);
  dot_k_x16_v<kQ5, false>(rows, k, x, ldx, mb, out);
}

// ---- Q4_0 and Q8_0 with x rounded to 16 bits (x16 kernels over pairs of 32-element blocks) ----
//
// x is rounded as for Q4_K (per 256 elements, s = absmax / 32767; a last group of k % 256
// elements takes its own absmax) and laid out per pair of 32-element blocks (64 elements) as
// two vectors of 32 int16: xa = [x 0..15 of the first block, x 0..15 of the second], xb = the
// same for elements 16..31; per 256-element group four pairs (128 floats) then s (16 floats).
// A pair of weight blocks then needs one 32-byte gather of the two blocks' first (Q8_0) or only
// (Q4_0) 16 code bytes, a widening to int16 (Q4_0: the two nibbles, minus 8) and per row of x
// two vpmaddwd, whose int32 lanes 0..7 hold the first block's and 8..15 the second's partial
// sums (exact: at most 4 * 128 * 32767 < 2^24), converted to f32 and multiplied by
// [d0 s x8, d1 s x8]. An odd last block pairs with zero codes and x.
constexpr int64_t kX16PairGroupFloats = 144;  // 4 pairs x 32 floats (64 int16) + s + 15 zero

int64_t x16_pair_floats(int64_t k) {
  return (k + 255) / 256 * kX16PairGroupFloats;
}

void prep_x16_pairs(const float* x, int64_t k, float* out) {
  for (int64_t g = 0; g < (k + 255) / 256; ++g) {
    const float* xg = x + 256 * g;
    const int n = static_cast<int>(std::min<int64_t>(256, k - 256 * g));  // a multiple of 32
    float* o = out + g * kX16PairGroupFloats;
    // A group with an inf or NaN: inv = 0, s = NaN, so its outputs come out NaN.
    float sx, inv;
    block_x_scale(xg, n, 32767.0f, &sx, &inv);
    int16_t* q = reinterpret_cast<int16_t*>(o);
    std::memset(q, 0, 256 * sizeof(int16_t));
    for (int c = 0; c < n; c += 16) {
      // Elements c .. c + 15: block c / 32 of the group, half (c / 16) % 2.
      const int blk = c / 32, half = (c / 16) % 2;
      const __m512i v =
          _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + c), _mm512_set1_ps(inv)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 64 * (blk / 2) + 32 * half + 16 * (blk % 2)),
                          _mm512_cvtsepi32_epi16(v));
    }
    o[128] = sx;
    for (int j = 129; j < kX16PairGroupFloats; ++j) o[j] = 0.0f;
  }
}

// kQ8: Q8_0 (34-byte blocks of f16 d and 32 int8), else Q4_0 (18 bytes: d, 16 bytes of nibbles).
template <bool kQ8, int MB>
void dot_pair_x16_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                     float* out) {
  constexpr int kBytes = kQ8 ? 34 : 18;
  constexpr int R = kRows;
  __m512 acc[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  const int64_t nb = k / 32;
  const int64_t ahead = prefetch_ahead(nb * kBytes);
  const __m512i dsel = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    const int64_t g = b / 8, pr = (b % 8) / 2;
    __m512 sv[MB];
    for (int i = 0; i < MB; ++i) sv[i] = _mm512_set1_ps(x[i * ldx + g * kX16PairGroupFloats + 128]);
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = rows[r] + b * kBytes;
      for (int off = 0; off < 2 * kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
      }
      uint16_t h0, h1 = 0;
      std::memcpy(&h0, p, 2);
      if (two) std::memcpy(&h1, p + kBytes, 2);
      const __m512 dv = _mm512_permutexvar_ps(
          dsel, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(h0 | h1 << 16))));
      const __m128i z = _mm_setzero_si128();
      __m512i lo, hi;
      if (kQ8) {
        const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(load16(p + 2)),
                                                  two ? load16(p + kBytes + 2) : z, 1);
        const __m256i c = _mm256_inserti128_si256(_mm256_castsi128_si256(load16(p + 18)),
                                                  two ? load16(p + kBytes + 18) : z, 1);
        lo = _mm512_cvtepi8_epi16(a);
        hi = _mm512_cvtepi8_epi16(c);
      } else {
        const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(load16(p + 2)),
                                                  two ? load16(p + kBytes + 2) : z, 1);
        const __m512i v = _mm512_cvtepu8_epi16(a);
        const __m512i eight = _mm512_set1_epi16(8);
        lo = _mm512_sub_epi16(_mm512_and_si512(v, _mm512_set1_epi16(15)), eight);
        hi = _mm512_sub_epi16(_mm512_srli_epi16(v, 4), eight);
      }
      for (int i = 0; i < MB; ++i) {
        const int16_t* xq =
            reinterpret_cast<const int16_t*>(x + i * ldx + g * kX16PairGroupFloats) + 64 * pr;
        const __m512i t = _mm512_add_epi32(_mm512_madd_epi16(lo, _mm512_load_si512(xq)),
                                           _mm512_madd_epi16(hi, _mm512_load_si512(xq + 32)));
        acc[i][r] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dv, sv[i]), acc[i][r]);
      }
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) out[i * R + r] = _mm512_reduce_add_ps(acc[i][r]);
}

template <bool kQ8>
void dot_pair_x16(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb,
                  float* out) {
  switch (mb) {
    case 1: return dot_pair_x16_mb<kQ8, 1>(rows, k, x, ldx, out);
    case 2: return dot_pair_x16_mb<kQ8, 2>(rows, k, x, ldx, out);
    case 3: return dot_pair_x16_mb<kQ8, 3>(rows, k, x, ldx, out);
    default: return dot_pair_x16_mb<kQ8, 4>(rows, k, x, ldx, out);
  }
}

template <class Dec>
void dequant(const uint8_t* row, int64_t k, float* out) {
  Dec d;
  for (int64_t b = 0; b < k / Dec::kBlock; ++b) {
    d.begin(row + b * Dec::kBytes);
    for (int c = 0; c < Dec::kBlock / 32; ++c) {
      __m512 w0, w1;
      d.get32(c, w0, w1);
      _mm512_storeu_ps(out + b * Dec::kBlock + 32 * c, w0);
      _mm512_storeu_ps(out + b * Dec::kBlock + 32 * c + 16, w1);
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
  // Decode of Q4_K and Q5_K against x16 (the f32 decoders above still dequantize for prefill).
  t.dot[static_cast<int>(GgmlType::kQ4_K)] = {kRows, kMaxM, dot_k_x16<false>, true, x16_floats,
                                              prep_x16};
  t.dot[static_cast<int>(GgmlType::kQ5_K)] = {kRows, kMaxM, dot_k_x16<true>, true, x16_floats,
                                              prep_x16};
  t.dot[static_cast<int>(GgmlType::kQ4_0)] = {kRows, kMaxM, dot_pair_x16<false>, true,
                                              x16_pair_floats, prep_x16_pairs};
  t.dot[static_cast<int>(GgmlType::kQ8_0)] = {kRows, kMaxM, dot_pair_x16<true>, true,
                                              x16_pair_floats, prep_x16_pairs};
  // Decode of Q6_K on the AVX2 x16 kernel (ymm), which measured faster than the f32 decoder
  // above (Emerald Rapids, 1 thread, bench_gemm_ggml --cached --types Q6_K, TinyLlama shapes,
  // two alternating runs): m = 1 261-262 against 408-410 us at 2048 x 2048 (1.56x), 723-734
  // against 1138-1153 us at 5632 x 2048 / 2048 x 5632; m = 4 the same (0.97-1.04x). Not
  // measured on Zen 4.
  t.dot[static_cast<int>(GgmlType::kQ6_K)] = ggml_x16_dot_avx2(GgmlType::kQ6_K);
  t.dot_vnni[static_cast<int>(GgmlType::kQ6_K)] = {kRows, kMaxM, ggml_q6k_x16_dot_avx512_vnni,
                                                   true, x16_floats, prep_x16};
  t.dot_x8[static_cast<int>(GgmlType::kQ6_K)] = ggml_x8_dot_avx512_vnni(GgmlType::kQ6_K);
  // Q4_K and Q5_K on AVX512-VNNI: four rows in step, codes as bytes at both precisions.
  for (GgmlType q : {GgmlType::kQ4_K, GgmlType::kQ5_K}) {
    t.dot_vnni[static_cast<int>(q)] = ggml_q4k_dot_avx512_vnni(q, false);
    t.dot_vnni_batch[static_cast<int>(q)] = ggml_q4k_wide_dot_avx512_vnni(q);
    t.dot_x8[static_cast<int>(q)] = ggml_q4k_dot_avx512_vnni(q, true);
  }
  // Decode of the types whose only AVX-512 kernels were the f32 decoders above, on their AVX2
  // x16 kernels (ymm; VEX vpdpwssd where the CPU has AVX-VNNI), as Q6_K: Emerald Rapids, 1
  // thread, bench_gemm_ggml --cached, TinyLlama shapes, 4 alternating rounds, paired medians,
  // x16 / f32 decoder speed at m = 1: Q4_1 1.42-2.11x, Q5_0 1.23-1.29x, Q5_1 1.64-1.74x, IQ4_NL
  // 1.16-1.26x, IQ4_XS 1.29-1.42x, Q2_K 1.88-2.32x, Q3_K 1.50-1.52x; m = 2 and 3 1.03-1.69x. At
  // m = 4 the f32 decoder, which dequantizes once for all rows of x, holds its own for Q4_1
  // (0.94-0.99x), IQ4_NL (0.97-0.99x) and Q2_K (0.88-0.92x): they keep it from 4 rows on
  // (dot_batch); Q5_0 and Q3_K 1.0-1.22x, Q5_1 and IQ4_XS 0.97-1.05x there.
  for (GgmlType q : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kIQ4_NL,
                     GgmlType::kIQ4_XS, GgmlType::kQ2_K, GgmlType::kQ3_K}) {
    const int slot = static_cast<int>(q);
    if (q == GgmlType::kQ4_1 || q == GgmlType::kIQ4_NL || q == GgmlType::kQ2_K) {
      t.dot_batch[slot] = t.dot[slot];
    }
    t.dot[slot] = ggml_x16_dot_avx2(q);
  }
  // With GemmPrecision::kBf16 on AVX512-VNNI, Q2_K, Q3_K and IQ4_XS on the AVX2 x8 kernels
  // (gemm_ggml_x8_avx2.cc), against the x16 ones above (same bench with
  // SAMPAN_GEMM_PRECISION=bf16): Q2_K 1.25-1.51x (m = 1), 1.78-1.86x (m = 4); Q3_K 1.33-1.41x,
  // 1.12-1.13x; IQ4_XS 1.05-1.09x, 1.04-1.05x.
  const GgmlKernels& avx2 = ggml_kernels_avx2();
  for (GgmlType q : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS}) {
    t.dot_x8[static_cast<int>(q)] = avx2.dot_x8[static_cast<int>(q)];
  }
  t.epilogue = fma_kernels_avx512().epilogue;
  return t;
}

}  // namespace

const GgmlKernels& ggml_kernels_avx512() {
  static const GgmlKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
