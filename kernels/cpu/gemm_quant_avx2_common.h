// Pieces shared by the AVX2 quantized-weight kernels (gemm_quant_avx2.cc, the one-row decode
// kernels, and gemm_quant_batch_avx2.cc, the batched ones): the kI4 rounding of x per weight
// group and the horizontal sum. The batched int4 kernel promises results bit for
// bit equal to the one-row kernel's (the same x16, the same integer group sums, the same f32
// operations in the same order), which holds only while both use these definitions.
// Include only from files compiled with AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu::gemm_detail::avx2q {

inline float hsum(__m256 v) { return Avx2::reduce_add(v); }

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Weights per kI4 step of the AVX2 kernels: a group, but at least 64 (one 32-byte load).
constexpr int64_t i4_step(int64_t group) { return group < 64 ? 64 : group; }

struct XScale {
  float sx = 0.0f;   // x = sx * x16
  float inv = 0.0f;  // x16 = round(x * inv)
};

// Scale of x[c0, c0 + n) (n a multiple of 8) for x16 (xmax = kI4XMax) or x8 (kX8Max). A group
// with a NaN or an infinity gets sx = NaN and x16 = 0, so that its outputs come out NaN as with
// f32 arithmetic.
inline XScale group_scale(const float* x, int64_t c0, int64_t n, float xmax = kI4XMax) {
  const AbsMax a = absmax_avx2(x + c0, n);
  XScale s;
  if (!a.finite) {
    s.sx = std::numeric_limits<float>::quiet_NaN();
  } else if (a.value > 0.0f) {
    s.sx = a.value / xmax;
    s.inv = xmax / a.value;
  }
  return s;
}

// The lanes of a kI4 step (of i4_step(G) weights) take a per-group value v: group j (G >= 64), or
// groups 2j, 2j + 1 (G = 32: lanes 0..3 the first, 4..7 the second).
template <int G>
inline __m256 step_lanes(const float* v, int j) {
  if (G == 32) {
    return _mm256_setr_m128(_mm_broadcast_ss(v + 2 * j), _mm_broadcast_ss(v + 2 * j + 1));
  }
  return _mm256_broadcast_ss(v + j);
}
template <int G>
inline __m256i step_lanes(const int32_t* v, int j) {
  return _mm256_castps_si256(step_lanes<G>(reinterpret_cast<const float*>(v), j));
}

// x16 of x[c, c + 8) (zeros from k on; k is a multiple of 32), as int32 lanes.
inline __m256i quantize8(const float* x, int64_t c, int64_t k, __m256 inv) {
  if (c >= k) return _mm256_setzero_si256();
  const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + c), inv);
  return _mm256_cvtps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The bytes u = q + 8 = n ^ 8 (n the stored two's complement nibble) of 64 packed kI4 weights at w,
// the low nibbles (weights 2b) in lo and the high ones (2b + 1) in hi: a xor, two ands and a
// shift. kHalf reads 16 bytes (32 weights); the upper lanes are then 0.
template <bool kHalf>
inline void i4_unsigned_nibbles(const uint8_t* w, __m256i& lo, __m256i& hi) {
  const __m256i nib = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8(static_cast<char>(0x88));
  const __m256i b =
      kHalf ? _mm256_zextsi128_si256(_mm_xor_si128(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(w)),
                  _mm256_castsi256_si128(flip)))
            : _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), flip);
  lo = _mm256_and_si256(b, nib);
  hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
}

// s_w of a kI4 row's groups [g0, g0 + 8) as f32, exact from f16 or bf16 (0 past its ng groups).
inline __m256 i4_scales8(const QuantRow& row, bool bf16, int64_t ng, int64_t g0) {
  const int64_t n = ng - g0 < 8 ? ng - g0 : 8;
  const uint16_t* sp = static_cast<const uint16_t*>(row.scales) + g0;
  alignas(16) uint16_t tmp[8] = {};
  if (n < 8) {
    std::memcpy(tmp, sp, static_cast<size_t>(n) * 2);
    sp = tmp;
  }
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sp));
  return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
              : _mm256_cvtph_ps(h);
}

// 8 + z of a kI4 row's groups [g0, g0 + 8) as int32 lanes, in [0, 15] (z = 0 for a row without
// zero points and past its ng groups).
inline __m256i i4_offsets8(const QuantRow& row, int64_t ng, int64_t g0) {
  const int64_t n = ng - g0 < 8 ? ng - g0 : 8;
  int64_t zv = 0;
  if (row.zeros != nullptr) std::memcpy(&zv, row.zeros + g0, static_cast<size_t>(n));
  return _mm256_add_epi32(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(zv)), _mm256_set1_epi32(8));
}

// Software prefetch distance of the one-row kI4 kernels (measured in gemm_quant_avx2.cc).
constexpr int64_t kI4PrefetchBytes = 1536;

// The row loop of the one-row kI4 kernels (x16 and x8): NR weight rows read together, a step
// (i4_step(G) weights) of each in turn (NR = 4 at m = 1: the 4 streams of gemm_decode_walk.h
// interleaved, as the 16-bit kernels read them; NR = 1 decodes a row whole), times MT rows of
// prepared x (x: row 0's first step; kStepBytes per step), into out[i * ldo + r]. Each block of
// 8 groups has its scales converted before its steps. The kernel K provides Block,
// scales(row, g0, blk) (the groups [g0, g0 + 8)) and step<kHalf>(w, xs, blk, j, acc): acc[0..MT)
// += one step (step j of its block; kHalf: group 32's last 32 weights).
template <int G, int MT, int NR, int64_t kStepBytes, class K>
inline void i4_rows_loop(const K kern, const QuantRow* rows, int64_t k, const uint8_t* x,
                         float* out, int ldo) {
  constexpr int64_t S = i4_step(G);
  constexpr int kBlockSteps = static_cast<int>(8 * G / S);
  const int64_t full = k / S;
  __m256 acc[NR][MT];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  typename K::Block blk[NR];
  for (int64_t st0 = 0; st0 < full; st0 += kBlockSteps) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) kern.scales(rows[r], st0 * S / G, blk[r]);
    const int nj = full - st0 < kBlockSteps ? static_cast<int>(full - st0) : kBlockSteps;
    for (int j = 0; j < nj; ++j) {
      const int64_t st = st0 + j;
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const uint8_t* w = rows[r].data + st * (S / 2);
        if (S >= 128 || (st & 1) == 0) {  // once per 64-byte line
          _mm_prefetch(reinterpret_cast<const char*>(w + kI4PrefetchBytes), _MM_HINT_T0);
        }
        kern.template step<false>(w, x + st * kStepBytes, blk[r], j, acc[r]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    if (G == 32 && full * S < k) {  // one group of 32 left
      const int j = static_cast<int>(full % kBlockSteps);
      if (j == 0) kern.scales(rows[r], full * S / G, blk[r]);
      kern.template step<true>(rows[r].data + full * (S / 2), x + full * kStepBytes, blk[r], j,
                               acc[r]);
    }
    for (int i = 0; i < MT; ++i) out[i * ldo + r] = hsum(acc[r][i]);
  }
}

// The dispatch of the one-row kI4 kernels (x16: gemm_quant_avx2.cc, x8: gemm_quant_i4x8_avx2.cc).
// Rows<G, MT, NR, kAsym, kVnni>::run(rows, f, x, ldx_bytes, out, ldo) multiplies NR weight rows
// with MT rows of prepared x into out[i * ldo + r]. m = 1 takes the call's kRows rows together;
// more rows of x go in passes of at most 2 over each row (the second pass reads it from L1):
// measured (x16, weights in L1, best of 10) 12.9 and 13.4 weights per cycle per row of x at m = 3
// and 4, against 11.9 and 11.0 in one pass (3 ymm sums per row of x spill past 2).
template <template <int, int, int, bool, bool> class Rows, int kRows>
struct I4Dot {
  template <int G, bool kAsym, bool kVnni>
  static void by_m(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
    const uint8_t* xb = reinterpret_cast<const uint8_t*>(x.x);
    const int64_t ld = x.ldx * 4;
    if (x.mb == 1) return Rows<G, 1, kRows, kAsym, kVnni>::run(rows, f, xb, ld, out, kRows);
    for (int r = 0; r < kRows; ++r) {
      for (int i0 = 0; i0 < x.mb; i0 += 2) {
        const uint8_t* xi = xb + i0 * ld;
        float* o = out + i0 * kRows + r;
        if (x.mb - i0 >= 2) {
          Rows<G, 2, 1, kAsym, kVnni>::run(rows + r, f, xi, ld, o, kRows);
        } else {
          Rows<G, 1, 1, kAsym, kVnni>::run(rows + r, f, xi, ld, o, kRows);
        }
      }
    }
  }

  // QuantFormat::asymmetric: some rows may have zero points (the others read as z = 0). VEX
  // vpdpbusd on AVX-VNNI CPUs.
  static QuantDotFn resolve(const QuantFormat& f) {
    if (has_vex_vnni()) return f.asymmetric ? pick<true, true>(f) : pick<false, true>(f);
    return f.asymmetric ? pick<true, false>(f) : pick<false, false>(f);
  }
  static void dot(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
    resolve(f)(rows, f, x, out);
  }

 private:
  template <bool kAsym, bool kVnni>
  static QuantDotFn pick(const QuantFormat& f) {
    switch (f.group) {
      case 32: return by_m<32, kAsym, kVnni>;
      case 64: return by_m<64, kAsym, kVnni>;
      default: return by_m<128, kAsym, kVnni>;
    }
  }
};

// ---- kI4 with x rounded to int8 (GemmPrecision::kBf16: vnni_x8, bound kX8Error) ----
//
// The prepared row of the one-row and the batched x8 kernels (prep_i4_x8, in
// gemm_quant_i4x8_avx2.cc; both kernels read this one layout, so a row of x is rounded the same
// however many rows share the call): steps of S = i4_step(group) weights, a step being S / 64
// chunks of 64 bytes, then three vectors of 8 lanes:
//   chunk:  [0, 32) x8 of the even elements 2b, [32, 64) x8 of the odd ones 2b + 1, for the 32
//           weight bytes b of the chunk (byte b: weight 2b in its low nibble, 2b + 1 in its high)
//   +0:   int32 lane L: -8 X_L, X_L = the sum of x8 over elements 8L..8L+7 of every chunk of the
//         step (|X_L| <= 16 * 127: an int16)
//   +32:  X_L as an int16 in the low half of lane L, the high half 0 (vpmaddwd by 8 + z in both
//         halves gives (8 + z) X_L)
//   +64:  s_x per lane (f32): the step's group, or for group 32 lanes 0..3 the first group and
//         4..7 the second (0 past k)
constexpr int64_t i4x8_step_bytes(int64_t step) { return step + 96; }
int64_t i4x8_x_floats(int64_t k, int64_t group);
void prep_i4_x8(const float* x, int64_t k, int64_t group, float* out);

// ---- kF8E4M3 subnormal codes ----
//
// The fp8 kernels decode a code to the f32 w * 2^-120, which for E4M3 subnormals (exponent 0,
// mantissa not 0) is an f32 denormal; an FMA with a denormal operand takes a microcode assist on
// Intel cores unless MXCSR.DAZ is set (which would read it as 0): measured on an Emerald Rapids
// core, 46x slower per vector holding one. Quantized weights hold few such codes (~1e-4 of
// Gaussian weights scaled to 448; more where an outlier sets a row's scale), so the one-row
// kernel tests its codes cheaply (f8_maybe_subnormal), and where a block holds some, multiplies
// it with those codes zeroed and adds their products apart, in double. The batched kernel, whose
// decoded vectors serve several rows of x, decodes through F16C instead (fp8x8_to_f32).

// 8 E4M3 codes -> f32 holding 2^-8 times their values, exactly and without denormals: the code
// sign-extended to 16 bits and shifted so that exponent and mantissa land in an f16 (bias 15 for
// 7), E4M3 subnormals as f16 subnormals, which vcvtph2ps converts to normal f32 whatever MXCSR
// says. Four instructions per 8 codes (the kernels' vpmaddwd or vpmovsxbd decode takes three
// and makes denormals); where a decoded vector serves several rows of x that does not matter.
inline __m256 fp8x8_to_f32(__m128i b) {
  const __m128i w = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
                                  _mm_set1_epi16(static_cast<int16_t>(0xbf80)));
  return _mm256_cvtph_ps(w);
}

// Nonzero test of "some code of b0 or b1 has exponent 0" (a subnormal or a zero code): 8 minus
// (b & 0x78), saturated, is 8 exactly for those bytes.
inline bool f8_maybe_subnormal(__m256i b0, __m256i b1) {
  const __m256i e = _mm256_set1_epi8(0x78), eight = _mm256_set1_epi8(8);
  const __m256i t = _mm256_or_si256(_mm256_subs_epu8(eight, _mm256_and_si256(b0, e)),
                                    _mm256_subs_epu8(eight, _mm256_and_si256(b1, e)));
  return !_mm256_testz_si256(t, t);
}

// Bit j set when code j of b is subnormal.
inline uint32_t f8_subnormal_mask(__m256i b) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i e0 = _mm256_cmpeq_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x78)), zero);
  const __m256i m0 = _mm256_cmpeq_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x07)), zero);
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_andnot_si256(m0, e0)));
}

// The value of a subnormal E4M3 code: m * 2^-9, signed.
inline double f8_subnormal_value(uint8_t b) {
  const double v = (b & 7) * 0x1p-9;
  return b & 0x80 ? -v : v;
}

}  // namespace sampan::cpu::gemm_detail::avx2q
