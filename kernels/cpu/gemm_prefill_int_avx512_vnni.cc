// Prefill (m rows of x, from the prefill sizes on) of weights whose values are small integers
// times a per-group scale, on AVX512-VNNI CPUs without AMX, in integers: vpdpwssd multiplies
// int16 pairs and sums them into int32 lanes, 32 products per instruction where an FMA makes 16.
// Two widths of x: int16 (x16, the default) and int8 (x8, below).
// Formats: kI4 (any group, zero points; contract and bound: gemm_quant.h, i4_on_int_prefill)
// and GGUF Q4_0 / Q8_0 (blocks of 32 with an f16 scale), Q4_K (groups of 32 with a scale and a
// min), Q5_K (the same with a fifth bit) and Q6_K (groups of 16; gemm_ggml.h,
// ggml_on_int_prefill).
//
// x is rounded per (row of x, weight group) to x16 = round(x / s_x), s_x = absmax_g / xmax (kI4:
// kI4XMax, as the kI4 decode kernels round it; GGUF: 32767, within the GGUF x16 bound, whose
// blocks of 256 hold these groups of 32 or 16), and stored as int16 in element order, so the
// dword at pair p of a row holds x16 of elements 2p and 2p + 1 (prep_row). The weights of 32
// output columns are repacked per call into a panel [k / 2][32] of dwords, lane c of pair p
// holding the integer weights (kI4 q - z, Q4_0 n - 8, Q8_0 q, Q4_K / Q5_K q, Q6_K q - 32) of
// elements 2p and 2p + 1 of column c as two int16 (the format's pack function), with their scales (and
// the K types' mins) beside them. A group's sum of products
// is exact in int32 (|w| <= 136, |x16| <= 32767, at most 128 products per lane: < 2^30). The
// micro-kernel (tile) keeps 6 rows x 32 columns of group sums in 12 int32 registers and their
// f32 totals in 12 more: per pair of elements 2 panel loads, 6 dword broadcasts of x16 and 12
// vpdpwssd; per group one conversion and one FMA with s_w s_x per register. So a group's sum is
// exact before its one conversion to f32 (24 bits), and the f32 totals add one rounding per
// group: the bounds' f32 summation term.
//
// Order of work: a task takes whole units (32 columns of one weight block, or of the gate and
// the up block for kSiluMul), packs the unit's panel (k * 64 bytes, L2-resident) and then
// sweeps every row tile of x over it; the 6 rows of x16 of a tile (12 k bytes) stay in L1. The
// packing costs about as much as one row tile's products (it is amortized over m / 6 tiles).
// Tried and slower (Emerald Rapids, bench_gemm_quant gemm, m = 512): 12 or 8 rows per tile with
// the f32 totals in L1 (0.6x, 0.96x); k blocked so that a chunk of the panel stays in L1
// (16-64 KB chunks: 0.8-0.95x); this kernel for batched decode (m = 2..16: packing dominates,
// 0.3-1.0x the decode kernels).
//
// x8 (GemmPrecision::kBf16, vnni_x8 in gemm_quant.h): x rounded per group to int8
// (xmax = 127, bytes in element order, a dword per 4 elements), the weights packed as unsigned
// bytes u (kI4 q + 8, Q4_0 n, Q8_0 q + 128, Q4_K / Q5_K q, Q6_K q) so that w = s_w (u - off)
// (- mn), a panel [k / 4][32] of dwords holding 4 elements' u each, and vpdpbusd sums 4 u * x8
// per lane, twice the products of vpdpwssd per instruction. Each group's sums start from -off
// times the group's sum of x8 (prepared per row), so they sum (u - off) x8 exactly in int32
// (|u| <= 255, |x8| <= 128, at most 128 products per lane); kI4 zero points go through the mins
// term (mn = s_w z). Not the default: x8 is off by absmax_g / 254, 128x the x16 rounding
// (gemm_quant_cpu.cc's reason against AMX-INT8 prefill by default).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/ggml_dequant.h"
#include "kernels/cpu/gemm_prefill_int_common.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kCols = 32;  // output columns per unit / panel (two vectors of 16 lanes)
constexpr int kMr = 6;     // rows of x per micro-tile

// Row i of x: its groups' s_x and x16 (x8), s_x times their sums (xs, where the format has
// mins) and, for x8, -off times their sums (xo: the group sums then start from it, so that they
// sum (u - off) x8).
void prep_row(const float* x, const Plan& p, int32_t* xq, float* sx, float* xs, int32_t* xo) {
  auto* x8 = reinterpret_cast<int8_t*>(xq);
  for (int64_t g = 0; g < p.ng; ++g) {
    float s, inv;
    i4_x_group_scale(x, g * p.group, p.group, &s, &inv, p.xmax);
    zero_if_inverse_overflows(&s, &inv);  // absmax below ~2^-113 (x16), ~2^-121 (x8)
    sx[g] = s;
    const __m512 vinv = _mm512_set1_ps(inv);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t c = g * p.group; c < (g + 1) * p.group; c += 16) {
      const __m512i a = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + c), vinv),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      // |x16| <= xmax: the saturating narrowing is exact (an inf / NaN group's s_x is NaN).
      if (p.x8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(x8 + c), _mm512_cvtsepi32_epi8(a));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + c / 2), _mm512_cvtsepi32_epi16(a));
      }
      sum = _mm512_add_epi32(sum, a);
    }
    // |sum| <= 128 * 32767 < 2^24: exact in f32. A NaN group converts to INT_MIN lanes: its sum
    // is a don't-care (s_x is NaN, so xs is NaN and xo is multiplied by it later), taken as 0 so
    // that -off * total cannot overflow.
    const int32_t total = std::isnan(s) ? 0 : _mm512_reduce_add_epi32(sum);
    if (p.mins) xs[g] = s * static_cast<float>(total);
    if (p.x8) xo[g] = -p.off * total;
  }
}

// The 16-row index vector of a vpgatherdd over rows rb bytes apart.
inline __m512i row_index(int64_t rb) {
  return _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int>(rb)));
}

// kI4 for x8: byte j holds elements 2j (low nibble) and 2j + 1, so a quad is the 4 nibbles of
// 2 bytes, spread one per byte and turned from two's complement q to u = q + 8 (n ^ 8); off = 8,
// zero points as mins. Whole halves of 16 rows load 32 bytes (16 quads) of each row, spread
// them and transpose the 16 x 16 quads (transpose16, gemm_internal.h); a partial half, and bytes past the
// last multiple of 32, take 4 bytes (2 quads) of 16 rows per vpgatherdd. With gathers alone the
// packer took 8 % of an int4 prefill with SAMPAN_GEMM_PRECISION=bf16 on Zen 5 (perf, TinyLlama
// shape, prompt 512, 1 thread: 0.12x the tile's samples), transposing 3 % (0.042x): prefill
// 339-346 -> 358-362 tok/s, alternating.
void pack_i4_x8(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
                int32_t* panel, float* sw) {
  const int64_t rb = p.k / 2;  // bytes per weight row
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  i4_scales<kCols>(w, p, b, row0, cols, s, sw);
  const __m512i lo16 = _mm512_set1_epi32(0xffff), m8 = _mm512_set1_epi32(0x00ff00ff);
  const __m512i m4 = _mm512_set1_epi32(0x0f0f0f0f), eights = _mm512_set1_epi32(0x08080808);
  // n0 | n1 << 4 | n2 << 8 | n3 << 12 -> (n0 | n1 << 8 | n2 << 16 | n3 << 24) ^ 0x08080808.
  auto spread = [&](__m512i v) {
    const __m512i t = _mm512_and_si512(_mm512_or_si512(v, _mm512_slli_epi32(v, 8)), m8);
    return _mm512_xor_si512(
        _mm512_and_si512(_mm512_or_si512(t, _mm512_slli_epi32(t, 4)), m4), eights);
  };
  const __m512i idx = row_index(rb);
  for (int half = 0; half < 2; ++half) {
    const int n = std::clamp(cols - 16 * half, 0, 16);
    const __mmask16 mk = static_cast<__mmask16>((1u << n) - 1);
    const uint8_t* base = data + 16 * half * rb;
    int64_t j1 = 0;  // bytes before j1: done by the transposing loop
    if (n == 16) {
      for (; j1 + 32 <= rb; j1 += 32) {  // bytes j1..j1+31 of each row: quads j1 / 2 .. + 15
        __m512i r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = spread(_mm512_cvtepu16_epi32(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + i * rb + j1))));
        }
        transpose16(r);
        for (int q = 0; q < 16; ++q) _mm512_store_si512(panel + (j1 / 2 + q) * kCols + 16 * half, r[q]);
      }
    }
    for (int64_t j0 = j1; j0 < rb; j0 += 4) {  // bytes j0..j0+3: quads j0 / 2, j0 / 2 + 1
      // Masked lanes: 0, weights u - 8 = -8 against a scale of 0.
      const __m512i v = n == 0 ? _mm512_setzero_si512()
                               : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mk, idx,
                                                             base + j0, 1);
      _mm512_store_si512(panel + (j0 / 2) * kCols + 16 * half,
                         spread(_mm512_and_si512(v, lo16)));
      _mm512_store_si512(panel + (j0 / 2 + 1) * kCols + 16 * half,
                         spread(_mm512_srli_epi32(v, 16)));
    }
  }
}

// kI4 for x16: each byte's nibbles widened to q - z, whole halves of 16 rows by loads of 16
// bytes (pairs) of each row and a 16 x 16 transpose, the rest 4 bytes of 16 rows per vpgatherdd
// (as pack_i4_x8): default-precision int4 prefill 207-209 -> 213-217 tok/s (Zen 5, 1 thread,
// alternating).
void pack_i4(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
             int32_t* panel, float* sw) {
  const int64_t rb = p.k / 2;  // bytes per weight row
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  i4_scales<kCols>(w, p, b, row0, cols, s, sw);
  const __m512i low4 = _mm512_set1_epi32(0xf), eight = _mm512_set1_epi32(8);
  const __m512i lo16 = _mm512_set1_epi32(0xffff);
  for (int half = 0; half < 2; ++half) {
    const int n = std::clamp(cols - 16 * half, 0, 16);
    const __mmask16 mk = static_cast<__mmask16>((1u << n) - 1);
    const __m512i idx = row_index(rb);
    const uint8_t* base = data + 16 * half * rb;
    // Two's complement nibble n -> q = (n ^ 8) - 8; q - z = (n ^ 8) - (8 + z); the pair's two
    // int16 in a dword.
    auto pair = [&](__m512i bytes, __m512i zz) {
      const __m512i lo = _mm512_sub_epi32(_mm512_xor_si512(_mm512_and_si512(bytes, low4), eight), zz);
      const __m512i hi = _mm512_sub_epi32(
          _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi32(bytes, 4), low4), eight), zz);
      return _mm512_or_si512(_mm512_and_si512(lo, lo16), _mm512_slli_epi32(hi, 16));
    };
    int64_t j1 = 0;  // bytes before j1: done by the transposing loop (as pack_i4_x8)
    if (n == 16) {
      for (; j1 + 16 <= rb; j1 += 16) {  // bytes (pairs) j1..j1+15 of each row
        __m512i r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i * rb + j1)));
        }
        transpose16(r);
        for (int q = 0; q < 16; ++q) {
          const int64_t j = j1 + q;
          const __m512i zz = _mm512_load_si512(s.zz.data() + (2 * j / p.group) * kCols + 16 * half);
          _mm512_store_si512(panel + j * kCols + 16 * half, pair(r[q], zz));
        }
      }
    }
    for (int64_t j0 = j1; j0 < rb; j0 += 4) {  // bytes j0..j0+3: pairs j0..j0+3
      const __m512i zz = _mm512_load_si512(s.zz.data() + (2 * j0 / p.group) * kCols + 16 * half);
      // 4 bytes of each of 16 rows (masked lanes: 0, which with zz = 8 gives weight 0).
      const __m512i v = n == 0 ? _mm512_setzero_si512()
                               : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mk, idx,
                                                             base + j0, 1);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        _mm512_store_si512(panel + (j0 + t) * kCols + 16 * half,
                           pair(_mm512_srli_epi32(v, 8 * t), zz));
      }
    }
  }
}

// For x8: 64 elements (2 chunks) of 16 columns at a time, one zmm of u8 per column, transposed
// into 16 panel rows (quads) of 16 lanes. A k that is not a multiple of 64 pads the last
// transpose with zeros (panel quads past k / 4 that the tiles never read).
template <GgmlKind kKind>
void pack_ggml_x8(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch&,
                  int32_t* panel, float* sw) {
  using L = GgmlLayout<kKind>;
  const int64_t rb = p.k / L::kBlock * L::kBytes;
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  ggml_scales<kKind, kCols>(w, p, b, row0, cols, sw);
  const int64_t chunks = p.k / 32;
  for (int half = 0; half < 2; ++half) {
    const int n = std::clamp(cols - 16 * half, 0, 16);
    for (int64_t ch = 0; ch < chunks; ch += 2) {
      __m512i v[16];
      for (int c = 0; c < 16; ++c) {
        if (c >= n) {
          v[c] = _mm512_setzero_si512();
          continue;
        }
        const uint8_t* row = data + (16 * half + c) * rb;
        const __m256i c0 = ggml_chunk_u8<kKind>(row + ch * 32 / L::kBlock * L::kBytes,
                                                ch % (L::kBlock / 32));
        const __m256i c1 = ch + 1 < chunks
                               ? ggml_chunk_u8<kKind>(row + (ch + 1) * 32 / L::kBlock * L::kBytes,
                                                      (ch + 1) % (L::kBlock / 32))
                               : _mm256_setzero_si256();
        v[c] = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
      }
      transpose16(v);  // v[j]: quad j of the 64 elements for the 16 columns
      for (int j = 0; j < 16; ++j) {
        _mm512_store_si512(panel + (ch * 8 + j) * kCols + 16 * half, v[j]);
      }
    }
  }
}

// For x16: 32 elements (a Q4_0 / Q8_0 block, a 32-element chunk of the K types' 256) are 16
// dwords of int16 pairs u - kOff. Taken for 16 columns at a time and transposed into 16 panel
// rows of 16 lanes.
template <GgmlKind kKind>
void pack_ggml(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch&,
               int32_t* panel, float* sw) {
  using L = GgmlLayout<kKind>;
  const int64_t rb = p.k / L::kBlock * L::kBytes;  // bytes per weight row
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  ggml_scales<kKind, kCols>(w, p, b, row0, cols, sw);
  const __m512i off = _mm512_set1_epi16(L::kOff);
  for (int half = 0; half < 2; ++half) {
    const int n = std::clamp(cols - 16 * half, 0, 16);
    for (int64_t ch = 0; ch < p.k / 32; ++ch) {  // 32 elements: 16 pairs
      __m512i v[16];
      for (int c = 0; c < 16; ++c) {
        v[c] = c >= n ? _mm512_setzero_si512()
                      : _mm512_sub_epi16(
                            _mm512_cvtepu8_epi16(ggml_chunk_u8<kKind>(
                                data + (16 * half + c) * rb + ch * 32 / L::kBlock * L::kBytes,
                                ch % (L::kBlock / 32))),
                            off);
      }
      transpose16(v);  // v[j]: pair j of the chunk for the 16 columns
      for (int j = 0; j < 16; ++j) {
        _mm512_store_si512(panel + (ch * 16 + j) * kCols + 16 * half, v[j]);
      }
    }
  }
}

// acc += the pairwise int16 products of a and b (vpdpwssd). In asm so that the accumulator is
// updated in place: through the intrinsic GCC 12 copied every accumulator to another register
// once per step (12 vmovdqa per 12 vpdpwssd), which held the tile to ~0.75x.
inline void dpwssd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// acc += the products of the unsigned bytes of u and the signed bytes of s, 4 per lane
// (vpdpbusd; asm for the same reason).
inline void dpbusd(__m512i& acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
}

// c[i][0, kCols) = sum over groups g of s_w[g] s_x[i][g] sum_{g} w x16 (x8), for the MR rows of
// x from xq / sx (row i at xq + i ldq, sx + i ng): a dword step covers 2 elements (x16: pairs of
// q - z against x16) or 4 (x8: the quads of u against x8, each group's sums starting from xo =
// -off * sum x8); minus mn s_x sum x where the format has mins.
template <int MR, bool kX8>
void tile(const Plan& p, const int32_t* panel, const float* sw, const int32_t* xq,
          const float* sx, const float* xs, const int32_t* xo, float* c) {
  const int64_t steps = p.group / (kX8 ? 4 : 2);  // dword steps per group
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < p.ng; ++g) {
    __m512i s[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      s[i][0] = s[i][1] = kX8 ? _mm512_set1_epi32(xo[i * p.ng + g]) : _mm512_setzero_si512();
    }
    const int32_t* pw = panel + g * steps * kCols;
    const int32_t* px = xq + g * steps;
    for (int64_t j = 0; j < steps; ++j) {
      const __m512i w0 = _mm512_load_si512(pw + j * kCols);
      const __m512i w1 = _mm512_load_si512(pw + j * kCols + 16);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512i xb = _mm512_set1_epi32(px[i * p.ldq + j]);
        if constexpr (kX8) {
          dpbusd(s[i][0], w0, xb);
          dpbusd(s[i][1], w1, xb);
        } else {
          dpwssd(s[i][0], xb, w0);
          dpwssd(s[i][1], xb, w1);
        }
      }
    }
    const __m512 sw0 = _mm512_load_ps(sw + g * kCols), sw1 = _mm512_load_ps(sw + g * kCols + 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 f = _mm512_set1_ps(sx[i * p.ng + g]);
      acc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][0]), _mm512_mul_ps(sw0, f), acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][1]), _mm512_mul_ps(sw1, f), acc[i][1]);
    }
    if (p.mins) {  // minus mn times the group's sum of x
      const float* mn = sw + (p.ng + g) * kCols;
      const __m512 mn0 = _mm512_load_ps(mn), mn1 = _mm512_load_ps(mn + 16);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 t = _mm512_set1_ps(xs[i * p.ng + g]);
        acc[i][0] = _mm512_fnmadd_ps(mn0, t, acc[i][0]);
        acc[i][1] = _mm512_fnmadd_ps(mn1, t, acc[i][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm512_store_ps(c + i * kCols, acc[i][0]);
    _mm512_store_ps(c + i * kCols + 16, acc[i][1]);
  }
}

struct Avx512Kernel {
  static constexpr int kCols = gemm_detail::kCols, kMr = gemm_detail::kMr;
  static void prep_row(const float* x, const Plan& p, int32_t* xq, float* sx, float* xs,
                       int32_t* xo) {
    gemm_detail::prep_row(x, p, xq, sx, xs, xo);
  }
  template <int MR, bool kX8>
  static void tile(const Plan& p, const int32_t* panel, const float* sw, const int32_t* xq,
                   const float* sx, const float* xs, const int32_t* xo, float* c) {
    gemm_detail::tile<MR, kX8>(p, panel, sw, xq, sx, xs, xo, c);
  }
  static EpilogueFn epilogue() { return fma_kernels_avx512().epilogue; }
  static IntPackFn i4_pack(bool x8) { return x8 ? pack_i4_x8 : pack_i4; }
  template <GgmlKind kKind>
  static IntPackFn ggml_pack(bool x8) {
    return x8 ? pack_ggml_x8<kKind> : pack_ggml<kKind>;
  }
};

}  // namespace

void gemm_quant_i4_vnni_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                                GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  i4_prefill<Avx512Kernel>(m, x, ldx, w, ep, y, ldy, runner);
}

void gemm_ggml_vnni_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                            GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  ggml_prefill<Avx512Kernel>(m, x, ldx, w, ep, y, ldy, runner);
}

}  // namespace sampan::cpu::gemm_detail
