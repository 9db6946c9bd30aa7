// AVX-512 VNNI decode kernels for quantized weights (see gemm_quant.h); prefill keeps the
// AVX-512 table's dequantization. Called only where the active level has AVX512-VNNI
// (gemm_quant_cpu.cc).
//
// kI4: integer dot products with vpdpwssd (pairs of int16 products summed into int32 lanes).
// prep_i4 rounds x per weight group to x16 (the AVX2 kernel's rounding, bound in gemm_quant.h)
// and stores it as int16 in the order the kernel unpacks 64 packed bytes: 16-bit word j holds
// weights 4j..4j+3, one per nibble, so shifts, masks and one vpsubw per nibble give four vectors
// of q - z (details at the kernel). Four vpdpwssd per 128 weights and row of x sum (q - z) x16
// exactly in int32 lanes, converted to f32 and multiplied by s_w s_x with one FMA per 128
// weights (no horizontal sums in the k loop). vpdpbusd on the bytes of x16 (hi and lo) needs the
// same four instructions per 128 weights and row of x, plus a shift and an add to combine them.
//
// kF8E4M3: as the AVX2 kernel, the f32 is built from the byte by vpmaddwd by 2^12 and an and
// (w * 2^-120, exact, subnormals as f32 denormals), against x prepared as x * 2^64 in the order
// the kernel decodes, with the row scale times 2^56 applied to the finished sum; here on 64 bytes
// at a time: 9 vector operations per 64 weights shared by the rows of x and 4 FMAs per row of x.
// vdpbf16ps against x split into bf16 hi + lo also takes 4 instructions per 64 weights and row
// of x, so it saves no arithmetic (and on Emerald Rapids it issues once per 2.2 cycles, an FMA
// twice per cycle), and E4M3 subnormals do not become bf16 by shifts (vdpbf16ps reads bf16
// denormals as 0). Replacing some vpmaddwd by shifts measured the same (+-3 %). The f32
// denormals the decode makes of E4M3 subnormals are taken apart before the FMAs
// (f8_subnormal_codes / f8_subnormals, where the cost is measured). The F16C decode (no
// denormals: widen, shift, and, two vcvtph2ps) took 8.7 TSC cycles per 64 weights against 5.6
// for this one with normal codes on Emerald Rapids, in L1 (vcvtph2ps zmm issues once per cycle).
//
// Both take R = 4 rows per call, one of each of 4 streams (gemm_decode_walk.h): all four
// decoded together for one row of x (64 bytes of each in turn), two at a time (sharing each load
// of x) from m = 2 on, against up to 8 rows of x in one pass. Earlier measurements, one row at
// a time for m = 1: Measured, 1 thread, weights in L1/L2 (k = 2048, kernel alone,
// GB/s of weights, best of 200): int4 g128 m = 1: 21-22, m = 4: 7.4, m = 8: 3.6 (AVX2 kernel:
// 18-20, 4.5, -); fp8 m = 1: 25 (27 with two rows at a time), m = 4: 7.4, m = 8: 3.6 (AVX2:
// 24-26, 6.2, -). Past m = 4 the rows of x (2.5 and 4 bytes per weight) no longer fit L1 next
// to the weights, and the loop runs at about one vector operation per cycle.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized; silenced before the header is read (as in gemm_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_quant.h"

namespace sampan::cpu::gemm_detail {
namespace {

// Rows per call, against all mb <= kMaxM rows of x in one pass. The driver takes them from four
// separate streams (gemm_decode_walk.h).
constexpr int kRows = 4;
constexpr int kMaxM = 8;
// Rows of a call decoded together (64 bytes of each in turn), sharing the loads of x: all four
// for a single row of x, which reads the four streams interleaved (one row after another, fp8
// streamed at 0.75-0.85x that from DRAM), two from two rows of x on (registers).
constexpr int row_tile(int mt) { return mt == 1 ? 4 : 2; }
// Software prefetch this far ahead in the row, one per 64-byte line. On Emerald Rapids 3072
// streamed int4 m = 1 as fast as 1536; on a Zen 5 core (40 GB/s from one thread) int4 decode
// ran 1.05x with 3072 (TinyLlama shape, 1 thread, alternating runs).
constexpr int64_t kPrefetchBytes = 3072;

inline void prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// ---- kI4: prepared x ----
//
// Per row: steps of 128 weights (the last one zero-padded), then the f32 scales s_x of the
// groups (zero-padded to a multiple of 16). A step is 320 bytes:
//   [0, 256):   four vectors f = 0..3 of 32 int16: word j of vector f is x16 of weight 4j + f
//               (the nibble order of 16-bit word j of the packed weights)
//   [256, 320): 16 int32 lanes L: -8 times the sum of x16 over vectors f = 0..2 of the lane
//               (words 2L, 2L + 1), the offset of the unsigned nibbles (see the kernel)
constexpr int64_t kStep = 128;
constexpr int64_t kStepBytes = 320;

int64_t i4_steps(int64_t k) { return (k + kStep - 1) / kStep; }
int64_t i4_scale_floats(int64_t k, int64_t group) { return (k / group + 15) / 16 * 16; }

int64_t i4_x_floats(int64_t k, int64_t group) {
  return i4_steps(k) * kStepBytes / 4 + i4_scale_floats(k, group);
}

void prep_i4(const float* x, int64_t k, int64_t group, float* out) {
  const int64_t ng = k / group;
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  float* sx = out + i4_steps(k) * kStepBytes / 4;
  for (int64_t g = ng; g < i4_scale_floats(k, group); ++g) sx[g] = 0.0f;
  // Word j of the low (high) half of vector f: element 4j + f of w[0]:w[1] (w[2]:w[3]).
  alignas(64) int16_t idx_words[4][32];
  for (int f = 0; f < 4; ++f)
    for (int j = 0; j < 32; ++j) idx_words[f][j] = static_cast<int16_t>(4 * (j % 16) + f);
  float inv[kStep / 32] = {};  // per 32 weights of the step
  for (int64_t s0 = 0; s0 < k; s0 += kStep, dst += kStepBytes) {
    for (int64_t c = s0; c < s0 + kStep && c < k; c += group) {
      float v;
      i4_x_group_scale(x, c, group, &sx[c / group], &v);
      for (int64_t q = (c - s0) / 32; q < (c - s0 + group) / 32 && q < kStep / 32; ++q) inv[q] = v;
    }
    __m512i w[4];
    for (int q = 0; q < 4; ++q) {
      __m256i h[2];
      for (int t = 0; t < 2; ++t) {
        const int64_t c = s0 + 32 * q + 16 * t;
        __m512i v = _mm512_setzero_si512();
        if (c < k) {  // k is a multiple of 32
          const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + c), _mm512_set1_ps(inv[q]));
          v = _mm512_cvt_roundps_epi32(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        }
        h[t] = _mm512_cvtsepi32_epi16(v);  // |x16| <= 32639, or a NaN group's don't-care
      }
      w[q] = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
    }
    __m512i sum = _mm512_setzero_si512();
    for (int f = 0; f < 4; ++f) {
      const __m512i idx = _mm512_load_si512(idx_words[f]);
      const __m512i lo = _mm512_permutex2var_epi16(w[0], idx, w[1]);
      const __m512i hi = _mm512_permutex2var_epi16(w[2], idx, w[3]);
      const __m512i v = _mm512_inserti64x4(lo, _mm512_castsi512_si256(hi), 1);
      _mm512_storeu_si512(dst + 64 * f, v);
      if (f < 3) sum = _mm512_add_epi32(sum, _mm512_madd_epi16(v, _mm512_set1_epi16(1)));
    }
    const __m512i neg8 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3));
    _mm512_storeu_si512(dst + 256, neg8);
  }
}

// ---- kI4 dot kernel ----
//
// Word j of the packed weights holds weights 4j..4j+3 as nibbles n0..n3. The top one is
// sign-extended by one shift (q3); the others are taken as u = (n ^ 8) & 15 = q + 8 (a shift and
// a vpternlog each), whose offset of 8 is either subtracted from u (one vpsubw per vector, shared
// by the rows of x) or, for a single row of x, started from in the lane sum (-8 sum x16,
// prepared): one load instead of three vector operations. Zero points are subtracted from the
// vectors. So the lane sums are of (q - z) x16; per step and int32 lane (8 weights) |q - z| <= 15
// bounds a sum by 8 * 15 * 32639 < 2^22 (partial sums with the prepared offset by twice that):
// exact in int32 and in f32. Groups of 32 and 64 are 128-bit and 256-bit lanes of the step; a
// group of 128 is the step.
//
// Cost per 128 weights: 6 vector operations shared by the rows of x (9 from two rows of x on,
// 2 to 3 more with zero points), and per row of x 4 vpdpwssd, a conversion and an FMA.

template <int MT>
struct I4Block {
  alignas(64) float sws[MT][16];  // s_w * s_x per group of the block (16 groups)
  alignas(64) int32_t zw[16];     // z per group, in both int16 halves
};

template <int MT, bool kAsym>
inline void i4_block_scales(const QuantRow& row, bool bf16, int64_t ng, const float* const* sx,
                            int64_t g0, I4Block<MT>& blk) {
  const __mmask16 mk = mask16(ng - g0);
  const __m256i h = _mm256_maskz_loadu_epi16(mk, static_cast<const uint16_t*>(row.scales) + g0);
  const __m512 sw = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                         : _mm512_cvtph_ps(h);
  for (int i = 0; i < MT; ++i) {
    _mm512_store_ps(blk.sws[i], _mm512_mul_ps(sw, _mm512_loadu_ps(sx[i] + g0)));
  }
  if (kAsym) {
    __m512i z = _mm512_setzero_si512();
    if (row.zeros != nullptr) z = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, row.zeros + g0));
    _mm512_store_si512(blk.zw, _mm512_or_si512(_mm512_and_si512(z, _mm512_set1_epi32(0xffff)),
                                               _mm512_slli_epi32(z, 16)));
  }
}

// RT rows times MT rows of x (prepared, ldx_bytes apart): out[i * kRows + r]. The RT rows share
// each load of x, the MT rows of x each unpacking of the weights.
template <int G, int RT, int MT, bool kAsym>
void i4_rows(const QuantRow* rows, const QuantFormat& f, const uint8_t* x, int64_t ldx_bytes,
             float* out) {
  constexpr int kBlockSteps = 16 * G / kStep;  // steps per 16 groups
  const int64_t k = f.k, n_steps = i4_steps(k), ng = k / G;
  const float* sx[MT];
  for (int i = 0; i < MT; ++i)
    sx[i] = reinterpret_cast<const float*>(x + i * ldx_bytes + n_steps * kStepBytes);
  // Lane L's group within the step: L / 4 (G = 32), L / 8 (G = 64), 0 (G = 128).
  const __m512i lane_group = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), G == 32 ? 2 : 3);
  __m512 acc[MT][RT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) acc[i][r] = _mm512_setzero_ps();
  I4Block<MT> blk[RT];
  for (int64_t st = 0; st < n_steps; ++st) {
    const int j = static_cast<int>(st % kBlockSteps);
    if (j == 0) {
      for (int r = 0; r < RT; ++r) {
        i4_block_scales<MT, kAsym>(rows[r], f.bf16_scales, ng, sx, st * kStep / G, blk[r]);
      }
    }
    __m512i gidx = lane_group;
    if (G < kStep) gidx = _mm512_add_epi32(lane_group, _mm512_set1_epi32(j * (kStep / G)));
    constexpr bool kOffsetInX = MT == 1;
    const __m512i nib = _mm512_set1_epi16(0x000f), eight = _mm512_set1_epi16(8);
    __m512i q[RT][4];
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) {
      const uint8_t* w = rows[r].data + st * (kStep / 2);
      prefetch(w + kPrefetchBytes);
      const __m512i b = st * kStep + kStep <= k
                            ? _mm512_loadu_si512(w)
                            : _mm512_maskz_loadu_epi8(mask64((k - st * kStep) / 2), w);
      constexpr int kXorAnd = 0x28;  // vpternlog: (a ^ b) & c
      q[r][0] = _mm512_ternarylogic_epi32(b, eight, nib, kXorAnd);
      q[r][1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(b, 4), eight, nib, kXorAnd);
      q[r][2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(b, 8), eight, nib, kXorAnd);
      q[r][3] = _mm512_srai_epi16(b, 12);
      __m512i z = _mm512_setzero_si512();
      if (kAsym) {
        z = G == kStep ? _mm512_set1_epi32(blk[r].zw[j])
                       : _mm512_permutexvar_epi32(gidx, _mm512_load_si512(blk[r].zw));
        q[r][3] = _mm512_sub_epi16(q[r][3], z);
      }
      if (!kOffsetInX) z = _mm512_add_epi16(z, eight);
      if (kAsym || !kOffsetInX) {
#pragma GCC unroll 4
        for (int v = 0; v < 3; ++v) q[r][v] = _mm512_sub_epi16(q[r][v], z);
      }
    }
    const uint8_t* xs = x + st * kStepBytes;
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      const uint8_t* xi = xs + i * ldx_bytes;
      __m512i t[RT];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m512i xv = _mm512_loadu_si512(xi + 64 * v);
#pragma GCC unroll 4
        for (int r = 0; r < RT; ++r) {
          if (v == 0 && !kOffsetInX) {
            t[r] = _mm512_madd_epi16(q[r][0], xv);
          } else {
            if (v == 0) t[r] = _mm512_loadu_si512(xi + 256);
            t[r] = _mm512_dpwssd_epi32(t[r], q[r][v], xv);
          }
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < RT; ++r) {
        const __m512 s = G == kStep ? _mm512_set1_ps(blk[r].sws[i][j])
                                    : _mm512_permutexvar_ps(gidx, _mm512_load_ps(blk[r].sws[i]));
        acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[r]), s, acc[i][r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) out[i * kRows + r] = _mm512_reduce_add_ps(acc[i][r]);
}

template <int G, bool kAsym, int MT>
void dot_i4_rows(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(x.x);
  constexpr int RT = row_tile(MT);
  for (int r = 0; r < kRows; r += RT) {
    i4_rows<G, RT, MT, kAsym>(rows + r, f, xb, x.ldx * 4, out + r);
  }
}

template <int G, bool kAsym>
void dot_i4_g(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (x.mb) {
    case 1: return dot_i4_rows<G, kAsym, 1>(rows, f, x, out);
    case 2: return dot_i4_rows<G, kAsym, 2>(rows, f, x, out);
    case 3: return dot_i4_rows<G, kAsym, 3>(rows, f, x, out);
    case 4: return dot_i4_rows<G, kAsym, 4>(rows, f, x, out);
    case 5: return dot_i4_rows<G, kAsym, 5>(rows, f, x, out);
    case 6: return dot_i4_rows<G, kAsym, 6>(rows, f, x, out);
    case 7: return dot_i4_rows<G, kAsym, 7>(rows, f, x, out);
    default: return dot_i4_rows<G, kAsym, 8>(rows, f, x, out);
  }
}

template <bool kAsym>
void dot_i4_z(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (f.group) {
    case 32: return dot_i4_g<32, kAsym>(rows, f, x, out);
    case 64: return dot_i4_g<64, kAsym>(rows, f, x, out);
    default: return dot_i4_g<128, kAsym>(rows, f, x, out);
  }
}

void dot_i4(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  if (f.asymmetric) return dot_i4_z<true>(rows, f, x, out);
  return dot_i4_z<false>(rows, f, x, out);
}

// ---- kF8E4M3: prepared x ----

constexpr int64_t kF8Step = 64;

int64_t f8_x_floats(int64_t k) { return (k + kF8Step - 1) / kF8Step * kF8Step; }

// Per 64 elements, four vectors v of 16: element 4L + kField[v] at L, times 2^64; zeros from k.
void prep_f8(const float* x, int64_t k, float* out) {
  DenormalsKept keep;  // a denormal x times 2^64 is a normal f32
  static constexpr int kField[4] = {0, 2, 1, 3};
  const __m512 s = _mm512_set1_ps(0x1p64f);
  for (int64_t c = 0; c < k; c += kF8Step, out += kF8Step) {
    __m512 in[4];
    for (int q = 0; q < 4; ++q) {
      in[q] = _mm512_maskz_loadu_ps(mask16(k - c - 16 * q), x + c + 16 * q);
    }
    for (int v = 0; v < 4; ++v) {
      // Lanes 0..7 from in[0]:in[1], lanes 8..15 from in[2]:in[3], both 4L + field.
      const __m512i idx = _mm512_add_epi32(
          _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28),
          _mm512_set1_epi32(kField[v]));
      const __m512 lo = _mm512_permutex2var_ps(in[0], idx, in[1]);
      const __m512 hi = _mm512_permutex2var_ps(in[2], idx, in[3]);
      _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(_mm512_shuffle_f32x4(lo, hi, 0x44), s));
    }
  }
}

// ---- kF8E4M3 dot kernel ----

// 64 E4M3 bytes -> four vectors of f32 w * 2^-120: bytes 4L + {0, 2, 1, 3}[v] in vector v.
inline void f8_decode(__m512i b, __m512* w) {
  const __m512i even = _mm512_set1_epi32(1 << 12), odd = _mm512_set1_epi32(1 << 28);
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(0x87f00000u));  // sign, bits 26..20
  // vpmaddwd by 2^12 of a dword's low (high) word puts that word's high byte, sign-extended, at
  // bits 20..27; the and drops the low byte and the extension. Per dword L: bytes 4L, 4L + 2
  // from b << 8, 4L + 1, 4L + 3 from b.
  const __m512i b8 = _mm512_slli_epi16(b, 8);
  const __m512i words[4] = {b8, b8, b, b};
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    w[v] = _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_madd_epi16(words[v], v % 2 ? odd : even), keep));
  }
}

// Bytes of b that are E4M3 subnormals (exponent 0, mantissa not 0): f8_decode makes them f32
// denormals, which an FMA multiplies through a microcode assist unless MXCSR.DAZ is set (and DAZ
// would read them as 0). Measured on an Emerald Rapids core, fp8 m = 1 in L1: 5.6 TSC cycles per
// 64 weights with normal codes, 260 with a subnormal in every vector (random bytes). Quantized
// weights hold few (~1e-4 of Gaussian weights scaled to 448, more for heavy-tailed rows), so
// the kernel tests each 64 bytes (two mask instructions) and moves the rare subnormal lanes to
// f8_subnormals instead of paying an assist per vector.
inline __mmask64 f8_subnormal_codes(__m512i b) {
  const __mmask64 exp0 = _mm512_testn_epi8_mask(b, _mm512_set1_epi8(0x78));
  return _mm512_mask_test_epi8_mask(exp0, b, _mm512_set1_epi8(0x07));
}

// The subnormal lanes of the four decoded vectors w (f8_decode: w * 2^-120 as f32 denormals
// there; mantissa m at bits 22..20, value m * 2^-129) leave w (zeroed) for ws, which holds them
// times 2^64 as normal f32 (m * 2^-65; 0 in the other lanes): ws times x prepared as x * 2^64
// stays finite for |x| < 2^64, as the main products do. The kernel adds ws x to its own sums and
// scales them by 2^-64 at the end.
__attribute__((noinline)) void f8_subnormals(__m512* w, __m512* ws) {
  for (int v = 0; v < 4; ++v) {
    const __m512i p = _mm512_castps_si512(w[v]);
    const __mmask16 exp0 = _mm512_testn_epi32_mask(p, _mm512_set1_epi32(0x7f800000));
    const __mmask16 sub = _mm512_mask_test_epi32_mask(exp0, p, _mm512_set1_epi32(0x00700000));
    const __m512i mant = _mm512_and_si512(_mm512_srli_epi32(p, 20), _mm512_set1_epi32(7));
    const __m512 m = _mm512_mul_ps(_mm512_cvtepi32_ps(mant), _mm512_set1_ps(0x1p-65f));
    const __m512 sign = _mm512_castsi512_ps(_mm512_and_si512(p, _mm512_set1_epi32(INT32_MIN)));
    ws[v] = _mm512_maskz_mov_ps(sub, _mm512_or_ps(m, sign));
    w[v] = _mm512_maskz_mov_ps(static_cast<__mmask16>(~sub), w[v]);
  }
}

// RT rows times MT rows of prepared x (ldx floats apart): out[i * kRows + r]. NA accumulators
// per (row, row of x) so that their FMAs do not form one dependency chain. The RT rows are read
// 64 bytes of each in turn: rows of separate streams (gemm_decode_walk.h).
template <int RT, int MT, int NA>
void f8_rows(const QuantRow* rows, int64_t k, const float* x, int64_t ldx, float* out) {
  __m512 acc[MT][RT][NA];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
      for (int a = 0; a < NA; ++a) acc[i][r][a] = _mm512_setzero_ps();
  bool any_subnormal = false;
  __m512 slow[MT][RT];  // sums of the subnormal lanes' products, times 2^64 (f8_subnormals)
  for (int64_t kk = 0; kk < k; kk += kF8Step) {
    __m512 w[RT][4];
    __mmask64 sub[RT];
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) {
      const uint8_t* p = rows[r].data + kk;
      prefetch(p + kPrefetchBytes);
      const __m512i b = kk + kF8Step <= k ? _mm512_loadu_si512(p)
                                          : _mm512_maskz_loadu_epi8(mask64(k - kk), p);
      f8_decode(b, w[r]);
      sub[r] = f8_subnormal_codes(b);
    }
    __mmask64 any = sub[0];
#pragma GCC unroll 4
    for (int r = 1; r < RT; ++r) any |= sub[r];
    if (__builtin_expect(any != 0, 0)) {
      if (!any_subnormal) {
        any_subnormal = true;
        for (int i = 0; i < MT; ++i)
          for (int r = 0; r < RT; ++r) slow[i][r] = _mm512_setzero_ps();
      }
      for (int r = 0; r < RT; ++r) {
        if (sub[r] == 0) continue;
        // Through a copy: w itself never has its address taken, which would keep it in memory.
        __m512 wr[4] = {w[r][0], w[r][1], w[r][2], w[r][3]}, ws[4];
        f8_subnormals(wr, ws);
        for (int v = 0; v < 4; ++v) w[r][v] = wr[v];
        for (int i = 0; i < MT; ++i)
          for (int v = 0; v < 4; ++v)
            slow[i][r] =
                _mm512_fmadd_ps(ws[v], _mm512_loadu_ps(x + i * ldx + kk + 16 * v), slow[i][r]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m512 xv = _mm512_loadu_ps(x + i * ldx + kk + 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < RT; ++r) {
          acc[i][r][v % NA] = _mm512_fmadd_ps(w[r][v], xv, acc[i][r][v % NA]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RT; ++r) {
    const float s = row_scale(rows[r].scales) * 0x1p56f;  // 2^(120 - 64)
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      __m512 a = acc[i][r][0];
#pragma GCC unroll 4
      for (int j = 1; j < NA; ++j) a = _mm512_add_ps(a, acc[i][r][j]);
      float sum = _mm512_reduce_add_ps(a);
      if (any_subnormal) {  // in double: 2^-64 times a small sum may be an f32 denormal
        const double apart = _mm512_reduce_add_ps(slow[i][r]);
        sum = static_cast<float>(sum + apart * 0x1p-64);
      }
      out[i * kRows + r] = sum * s;
    }
  }
}

template <int MT>
void dot_f8_rows(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  constexpr int RT = row_tile(MT);
  constexpr int NA = MT * RT >= 8 ? 1 : MT * RT >= 4 ? 2 : 4;
  for (int r = 0; r < kRows; r += RT) f8_rows<RT, MT, NA>(rows + r, f.k, x.x, x.ldx, out + r);
}

void dot_f8(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  DenormalsKept keep;
  switch (x.mb) {
    case 1: return dot_f8_rows<1>(rows, f, x, out);
    case 2: return dot_f8_rows<2>(rows, f, x, out);
    case 3: return dot_f8_rows<3>(rows, f, x, out);
    case 4: return dot_f8_rows<4>(rows, f, x, out);
    case 5: return dot_f8_rows<5>(rows, f, x, out);
    case 6: return dot_f8_rows<6>(rows, f, x, out);
    case 7: return dot_f8_rows<7>(rows, f, x, out);
    default: return dot_f8_rows<8>(rows, f, x, out);
  }
}

QuantKernels make_table() {
  QuantKernels t = quant_kernels_avx512();  // prefill (dequantization) and the epilogue
  t.i4 = {kRows, kMaxM, dot_i4};
  t.f8 = {kRows, kMaxM, dot_f8};
  t.i4_x_floats = i4_x_floats;
  t.prep_i4 = prep_i4;
  t.f8_x_floats = f8_x_floats;
  t.prep_f8 = prep_f8;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_avx512_vnni() {
  static const QuantKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
