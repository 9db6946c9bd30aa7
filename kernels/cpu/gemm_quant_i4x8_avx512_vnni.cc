// INT4 decode (m = 1..8 rows of x) on AVX512-VNNI with x rounded to int8 per weight group:
// GemmPrecision::kBf16 (vnni_x8 in gemm_quant.h, bound kX8Error). The table is the VNNI one
// (gemm_quant_avx512_vnni.cc) with this kI4 kernel and its preparation of x; fp8, prefill and
// the epilogue are unchanged.
//
// Why: the x16 kernel spends per 128 weights 6-9 vector operations per weight row unpacking
// nibbles to int16 and 4 vpdpwssd (+ a conversion and an FMA) per row of x, so from m = 4 on a
// decode step is bound by arithmetic (1.9-2.0x the m = 1 step on Emerald Rapids). Here a weight
// row's 64 bytes become two vectors of unsigned bytes u = q + 8 in 3 operations (a vpternlog for
// the low nibbles, a shift and a vpternlog for the high ones), and a row of x takes 2 vpdpbusd
// (64 products each) per 128 weights.
//
// Prepared x per row: steps of 128 weights (the last one zero-padded), then the f32 scales s_x
// of the groups (zero-padded to a multiple of 16). A step is 192 bytes:
//   [0, 64):    xlo, byte j = x8 of element 2j (the low nibble of packed byte j)
//   [64, 128):  xhi, byte j = x8 of element 2j + 1 (the high nibble)
//   [128, 192): 16 int32 lanes L: -8 X_L, X_L = sum of x8 over elements 8L .. 8L + 7 (the
//               elements of lane L's 4 bytes in xlo and in xhi)
// Weights enter vpdpbusd as unsigned bytes u: u = q + 8 (symmetric; started from -8 X_L, lane L
// of vpdpbusd(u_lo, xlo) + vpdpbusd(u_hi, xhi) sums q x8 over elements 8L .. 8L + 7) or, with
// zero points, u = q - z + 16 in [1, 31] (a vpaddb of 8 - z per group, shared by the rows of x;
// started from -16 X_L, one shift of the prepared lanes per row of x). |sum| <= 8 * 31 * 127
// per step and lane plus the offset: exact in int32 and f32. A lane's 8 elements lie in one
// group (groups of 32, 64, 128), as in the x16 kernel.
//
// Cost per 128 weights and pair (row of x, weight row): 2 vpdpbusd, a conversion and an FMA
// (FMA, vpdpbusd and vpmaddwd share two pipes on Zen 5 and on Intel cores; the conversion runs
// beside them), the scale (a broadcast load at groups of 128), and 3/4 of a load: the 4 weight
// rows of a call share each row of x's three loads. Up to 4 rows of x per pass (16 f32
// accumulators, 8 unpacked weight vectors: 30 of 32 registers). Measured against the previous
// form (2 weight rows per load of x, asymmetric offsets by a vpmulld per pair: GCC reloaded x
// for every pair, 4 loads per pair and step, ~2.9 cycles per pair and step on a Zen 5 core with
// the weights in L1/L2).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/gemm_quant.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kRows = 4;  // weight rows per call (as the x16 kernel: four streams)
constexpr int kMaxM = 8;
constexpr int kPassM = 4;  // rows of x per pass over the call's 4 weight rows
constexpr int64_t kPrefetchBytes = 1536;
constexpr int64_t kStep = 128;
constexpr int64_t kStepBytes = 192;

int64_t steps_of(int64_t k) { return (k + kStep - 1) / kStep; }
int64_t scale_floats(int64_t k, int64_t group) { return (k / group + 15) / 16 * 16; }

int64_t x8_floats(int64_t k, int64_t group) {
  return steps_of(k) * kStepBytes / 4 + scale_floats(k, group);
}

void prep_x8(const float* x, int64_t k, int64_t group, float* out) {
  const int64_t ng = k / group;
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  float* sx = out + steps_of(k) * kStepBytes / 4;
  for (int64_t g = ng; g < scale_floats(k, group); ++g) sx[g] = 0.0f;
  float inv[kStep / 32] = {};  // per 32 weights of the step
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t s0 = 0; s0 < k; s0 += kStep, dst += kStepBytes) {
    for (int64_t c = s0; c < s0 + kStep && c < k; c += group) {
      float s, v;
      i4_x_group_scale(x, c, group, &s, &v, kX8Max);
      zero_if_inverse_overflows(&s, &v);  // absmax below ~2^-121
      sx[c / group] = s;
      for (int64_t q = (c - s0) / 32; q < (c - s0 + group) / 32 && q < kStep / 32; ++q) inv[q] = v;
    }
    // x8 in element order, 64 elements per vector: 4 x 16 int32 narrowed to bytes.
    __m512i e[2];
    for (int h = 0; h < 2; ++h) {
      __m128i b[4];
      for (int t = 0; t < 4; ++t) {
        const int64_t c = s0 + 64 * h + 16 * t;
        __m512i v = _mm512_setzero_si512();
        if (c < k) {  // k is a multiple of 32
          const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + c), _mm512_set1_ps(inv[(c - s0) / 32]));
          v = _mm512_cvt_roundps_epi32(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        }
        b[t] = _mm512_cvtsepi32_epi8(v);  // |x8| <= 127, or a NaN group's don't-care
      }
      e[h] = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_set_m128i(b[1], b[0])), _mm256_set_m128i(b[3], b[2]), 1);
    }
    // Even / odd elements: the low / high byte of each 16-bit word, sign-extended and narrowed.
    const __m512i lo = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_slli_epi16(e[0], 8), 8))),
        _mm512_cvtepi16_epi8(_mm512_srai_epi16(_mm512_slli_epi16(e[1], 8), 8)), 1);
    const __m512i hi = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srai_epi16(e[0], 8))),
        _mm512_cvtepi16_epi8(_mm512_srai_epi16(e[1], 8)), 1);
    _mm512_storeu_si512(dst, lo);
    _mm512_storeu_si512(dst + 64, hi);
    const __m512i sum =
        _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo), ones, hi);
    _mm512_storeu_si512(dst + 128, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3)));
  }
}

// acc += 4 products of unsigned bytes of u and signed bytes of s per lane (in asm: the
// intrinsic made GCC 12 copy accumulators, as in the prefill kernel).
inline void dpbusd(__m512i& acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
}

// s_w s_x of the 16 groups from g0 per row of x, and 8 - z per group as bytes (kAsym).
template <int MT, bool kAsym>
struct Block {
  alignas(64) float sws[MT][16];
  __m512i zb;  // byte 16 l + c: 8 - z of group c (every 128-bit lane l alike)
};

template <int MT, bool kAsym>
inline void block_scales(const QuantRow& row, bool bf16, int64_t ng, const float* const* sx,
                         int64_t g0, Block<MT, kAsym>& blk) {
  const int64_t n = ng - g0;
  const __mmask16 mk = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
  const __m256i h = _mm256_maskz_loadu_epi16(mk, static_cast<const uint16_t*>(row.scales) + g0);
  const __m512 sw = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                         : _mm512_cvtph_ps(h);
  for (int i = 0; i < MT; ++i) {
    _mm512_store_ps(blk.sws[i], _mm512_mul_ps(sw, _mm512_loadu_ps(sx[i] + g0)));
  }
  if (kAsym) {
    __m128i z = _mm_setzero_si128();
    if (row.zeros != nullptr) z = _mm_maskz_loadu_epi8(mk, row.zeros + g0);
    blk.zb = _mm512_broadcast_i32x4(_mm_sub_epi8(_mm_set1_epi8(8), z));
  }
}

// RT rows times MT rows of prepared x (ldx_bytes apart): out[i * kRows + r].
template <int G, int RT, int MT, bool kAsym>
void rows_x8(const QuantRow* rows, const QuantFormat& f, const uint8_t* x, int64_t ldx_bytes,
             float* out) {
  constexpr int kBlockSteps = 16 * G / kStep;  // steps per 16 groups
  const int64_t k = f.k, n_steps = steps_of(k), ng = k / G;
  const float* sx[MT];
  for (int i = 0; i < MT; ++i)
    sx[i] = reinterpret_cast<const float*>(x + i * ldx_bytes + n_steps * kStepBytes);
  const __m512i lane_group = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), G == 32 ? 2 : 3);
  // Byte b of 128-bit lane l (kAsym): the group of lane l within the step, l (G = 32), l / 2
  // (G = 64), 0 (G = 128): a vpshufb index into Block::zb.
  constexpr int64_t kBytes = 0x0101010101010101;  // times the group: 8 equal bytes
  constexpr int64_t kL1 = G == 32 ? kBytes : 0, kL2 = kBytes * (G == 32 ? 2 : G == 64 ? 1 : 0);
  constexpr int64_t kL3 = kBytes * (G == 32 ? 3 : G == 64 ? 1 : 0);
  const __m512i byte_group = _mm512_set_epi64(kL3, kL3, kL2, kL2, kL1, kL1, 0, 0);
  const __m512i c08 = _mm512_set1_epi8(0x08), c0f = _mm512_set1_epi8(0x0f);
  __m512 acc[MT][RT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) acc[i][r] = _mm512_setzero_ps();
  Block<MT, kAsym> blk[RT];
  for (int64_t st = 0; st < n_steps; ++st) {
    const int j = static_cast<int>(st % kBlockSteps);
    if (j == 0) {
      for (int r = 0; r < RT; ++r) {
        block_scales<MT, kAsym>(rows[r], f.bf16_scales, ng, sx, st * kStep / G, blk[r]);
      }
    }
    __m512i gidx = lane_group;
    if (G < kStep) gidx = _mm512_add_epi32(lane_group, _mm512_set1_epi32(j * (kStep / G)));
    __m512i ulo[RT], uhi[RT];
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) {
      const uint8_t* w = rows[r].data + st * (kStep / 2);
      _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetchBytes), _MM_HINT_T0);
      const __m512i b = st * kStep + kStep <= k
                            ? _mm512_loadu_si512(w)
                            : _mm512_maskz_loadu_epi8(mask64((k - st * kStep) / 2), w);
      constexpr int kXorAnd = 0x28;  // vpternlog: (a ^ b) & c
      ulo[r] = _mm512_ternarylogic_epi32(b, c08, c0f, kXorAnd);
      uhi[r] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(b, 4), c08, c0f, kXorAnd);
      if (kAsym) {
        const __m512i zb = _mm512_shuffle_epi8(
            blk[r].zb, _mm512_add_epi8(byte_group, _mm512_set1_epi8(static_cast<char>(j * (kStep / G)))));
        ulo[r] = _mm512_add_epi8(ulo[r], zb);
        uhi[r] = _mm512_add_epi8(uhi[r], zb);
      }
    }
    const uint8_t* xs = x + st * kStepBytes;
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      const uint8_t* xi = xs + i * ldx_bytes;
      const __m512i xlo = _mm512_loadu_si512(xi), xhi = _mm512_loadu_si512(xi + 64);
      __m512i start = _mm512_loadu_si512(xi + 128);
      if (kAsym) start = _mm512_slli_epi32(start, 1);  // -16 X_L
#pragma GCC unroll 4
      for (int r = 0; r < RT; ++r) {
        __m512i t = start;
        dpbusd(t, ulo[r], xlo);
        dpbusd(t, uhi[r], xhi);
        const __m512 s = G == kStep ? _mm512_set1_ps(blk[r].sws[i][j])
                                    : _mm512_permutexvar_ps(gidx, _mm512_load_ps(blk[r].sws[i]));
        acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, acc[i][r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) out[i * kRows + r] = _mm512_reduce_add_ps(acc[i][r]);
}

template <int G, bool kAsym, int MT>
void dot_mt(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(x.x);
  const int64_t ldx_bytes = x.ldx * 4;
  if constexpr (MT <= kPassM) {
    rows_x8<G, kRows, MT, kAsym>(rows, f, xb, ldx_bytes, out);
  } else {  // two passes over the weight rows (in L1 by the second)
    constexpr int kFirst = (MT + 1) / 2;
    rows_x8<G, kRows, kFirst, kAsym>(rows, f, xb, ldx_bytes, out);
    rows_x8<G, kRows, MT - kFirst, kAsym>(rows, f, xb + kFirst * ldx_bytes, ldx_bytes,
                                          out + kFirst * kRows);
  }
}

template <int G, bool kAsym>
void dot_g(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (x.mb) {
    case 1: return dot_mt<G, kAsym, 1>(rows, f, x, out);
    case 2: return dot_mt<G, kAsym, 2>(rows, f, x, out);
    case 3: return dot_mt<G, kAsym, 3>(rows, f, x, out);
    case 4: return dot_mt<G, kAsym, 4>(rows, f, x, out);
    case 5: return dot_mt<G, kAsym, 5>(rows, f, x, out);
    case 6: return dot_mt<G, kAsym, 6>(rows, f, x, out);
    case 7: return dot_mt<G, kAsym, 7>(rows, f, x, out);
    default: return dot_mt<G, kAsym, 8>(rows, f, x, out);
  }
}

template <bool kAsym>
void dot_z(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (f.group) {
    case 32: return dot_g<32, kAsym>(rows, f, x, out);
    case 64: return dot_g<64, kAsym>(rows, f, x, out);
    default: return dot_g<128, kAsym>(rows, f, x, out);
  }
}

void dot_i4_x8(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  if (f.asymmetric) return dot_z<true>(rows, f, x, out);
  return dot_z<false>(rows, f, x, out);
}

QuantKernels make_table() {
  QuantKernels t = quant_kernels_avx512_vnni();
  t.i4 = {kRows, kMaxM, dot_i4_x8};
  t.i4_x_floats = x8_floats;
  t.prep_i4 = prep_x8;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_avx512_vnni_x8() {
  static const QuantKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
