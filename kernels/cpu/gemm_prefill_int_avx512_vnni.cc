// Prefill (m rows of x, from the prefill sizes on) of weights whose values are small integers
// times a per-group scale, on AVX512-VNNI CPUs without AMX, in integers: vpdpwssd multiplies
// int16 pairs and sums them into int32 lanes, 32 products per instruction where an FMA makes 16.
// Two widths of x: int16 (x16, the default) and int8 (x8, below).
// Formats: kI4 (any group, zero points; contract and bound: gemm_quant.h, i4_on_vnni_prefill)
// and GGUF Q4_0 / Q8_0 (blocks of 32 with an f16 scale), Q4_K (groups of 32 with a scale and a
// min), Q5_K (the same with a fifth bit) and Q6_K (groups of 16; gemm_ggml.h,
// ggml_on_vnni_prefill).
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
// x8 (GemmPrecision::kBf16, vnni_prefill_x8 in gemm_quant.h): x rounded per group to int8
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

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kCols = 32;  // output columns per unit / panel (two vectors of 16 lanes)
constexpr int kMr = 6;     // rows of x per micro-tile

struct Plan {
  int64_t m = 0, k = 0, group = 0, ng = 0;
  int64_t ldq = 0;  // dwords per prepared row of x: k / 2 (x16), k / 4 rounded up to 16 (x8)
  bool bf16_scales = false;   // kI4 only
  bool x8 = false;            // x rounded to int8, the panel of u8 quads (vpdpbusd)
  float xmax = kI4XMax;       // x16 (x8) range
  int32_t off = 0;            // x8: the weight is u - off (u the panel's unsigned byte)
  bool mins = false;          // w = s_w q - mn (Q4_K, Q5_K; x8 kI4 with zero points, mn =
                              // s_w z): the group sums of x are needed
  const int32_t* xq = nullptr;  // [m][ldq]: x16 pairs (x8 quads)
  const float* sx = nullptr;    // [m][ng]: s_x (0 for a group taken as zero, NaN for inf / NaN)
  const float* xs = nullptr;    // [m][ng]: s_x * sum of the group's x16 (x8) (mins only)
  const int32_t* xo = nullptr;  // [m][ng]: x8: -off * sum of the group's x8
};

// Row i of x: its groups' s_x and x16 (x8), s_x times their sums (xs, where the format has
// mins) and, for x8, -off times their sums (xo: the group sums then start from it, so that they
// sum (u - off) x8).
void prep_row(const float* x, const Plan& p, int32_t* xq, float* sx, float* xs, int32_t* xo) {
  auto* x8 = reinterpret_cast<int8_t*>(xq);
  for (int64_t g = 0; g < p.ng; ++g) {
    float s, inv;
    i4_x_group_scale(x, g * p.group, p.group, &s, &inv, p.xmax);
    if (!(inv < INFINITY)) {  // absmax below ~2^-113: 1 / s_x overflows; the group counts as 0
      if (!std::isnan(s)) s = 0.0f;
      inv = 0.0f;
    }
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
    // |sum| <= 128 * 32767 < 2^24: exact in f32. NaN groups: s_x NaN, so xs NaN too (xo is then
    // some integer, multiplied by s_x later).
    const int32_t total = _mm512_reduce_add_epi32(sum);
    if (p.mins) xs[g] = s * static_cast<float>(total);
    if (p.x8) xo[g] = -p.off * total;
  }
}

struct Scratch {
  AlignedBuffer<int32_t> panel;  // [2 (gate, up)][k / 2][kCols] (x8: [k / 4, rounded up to
                                 // 16][kCols] used)
  AlignedBuffer<float> sw;       // [2][2][ng][kCols]: s_w, then mn (mins only); 0 past the
                                 // unit's columns
  AlignedBuffer<int32_t> zz;     // [ng][kCols]: 8 + z (kI4 x16)
  alignas(64) float c[2][kMr * kCols];  // a tile's results (gate, up)
};

Scratch& task_scratch(const Plan& p) {
  thread_local Scratch s;
  s.panel.reserve(2 * p.k / 2 * kCols);
  s.sw.reserve(4 * p.ng * kCols);
  s.zz.reserve(p.ng * kCols);
  return s;
}

// Columns [row0, row0 + cols) of weight block b into panel [k / 2][kCols] (x8: [k / 4][kCols],
// padded to 16 quads for GGUF) and its scales into
// sw [ng][kCols] (formats with mins: their mins into sw + ng kCols, [ng][kCols]); columns from
// cols on get zero weights, scales and mins.
using IntPackFn = void (*)(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols,
                           Scratch& s, int32_t* panel, float* sw);

// kI4's scales of columns [row0, row0 + cols) of block b into sw [ng][kCols], 8 + z into s.zz
// (x16) and, where p.mins (x8 with zero points), s_w z into sw + ng kCols; 0 past cols.
void i4_scales(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
               float* sw) {
  const auto* scales = static_cast<const uint16_t*>(w.scales[b]) + row0 * p.ng;
  const int8_t* zeros = w.zeros[b] ? w.zeros[b] + row0 * p.ng : nullptr;
  for (int c = 0; c < kCols; ++c) {
    for (int64_t g = 0; g < p.ng; ++g) {
      float v = 0.0f;
      int32_t z = 0;
      if (c < cols) {
        const uint16_t h = scales[c * p.ng + g];
        v = p.bf16_scales ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : _cvtsh_ss(h);
        z = zeros ? zeros[c * p.ng + g] : 0;
      }
      sw[g * kCols + c] = v;
      if (p.x8) {
        if (p.mins) sw[(p.ng + g) * kCols + c] = v * static_cast<float>(z);  // exact: 8 + 8 bits
      } else {
        s.zz.data()[g * kCols + c] = 8 + z;
      }
    }
  }
}

// The 16-row index vector of a vpgatherdd over rows rb bytes apart.
inline __m512i row_index(int64_t rb) {
  return _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int>(rb)));
}

// kI4 for x8: 4 bytes (8 elements, 2 quads) of 16 rows per vpgatherdd; byte j holds elements 2j
// (low nibble) and 2j + 1, so a quad is the 4 nibbles of 2 bytes, spread one per byte and
// turned from two's complement q to u = q + 8 (n ^ 8); off = 8, zero points as mins.
void pack_i4_x8(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
                int32_t* panel, float* sw) {
  const int64_t rb = p.k / 2;  // bytes per weight row
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  i4_scales(w, p, b, row0, cols, s, sw);
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
    for (int64_t j0 = 0; j0 < rb; j0 += 4) {  // bytes j0..j0+3: quads j0 / 2, j0 / 2 + 1
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

// kI4 for x16: 4 bytes of 16 rows per vpgatherdd, each byte's nibbles widened to q - z.
void pack_i4(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
             int32_t* panel, float* sw) {
  const int64_t rb = p.k / 2;  // bytes per weight row
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  i4_scales(w, p, b, row0, cols, s, sw);
  const __m512i low4 = _mm512_set1_epi32(0xf), eight = _mm512_set1_epi32(8);
  const __m512i lo16 = _mm512_set1_epi32(0xffff);
  for (int half = 0; half < 2; ++half) {
    const int n = std::clamp(cols - 16 * half, 0, 16);
    const __mmask16 mk = static_cast<__mmask16>((1u << n) - 1);
    const __m512i idx = row_index(rb);
    const uint8_t* base = data + 16 * half * rb;
    for (int64_t j0 = 0; j0 < rb; j0 += 4) {  // bytes j0..j0+3: pairs j0..j0+3
      const __m512i zz = _mm512_load_si512(s.zz.data() + (2 * j0 / p.group) * kCols + 16 * half);
      // 4 bytes of each of 16 rows (masked lanes: 0, which with zz = 8 gives weight 0).
      const __m512i v = n == 0 ? _mm512_setzero_si512()
                               : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mk, idx,
                                                             base + j0, 1);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        // Two's complement nibble n -> q = (n ^ 8) - 8; q - z = (n ^ 8) - (8 + z).
        const __m512i lo = _mm512_sub_epi32(
            _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi32(v, 8 * t), low4), eight), zz);
        const __m512i hi = _mm512_sub_epi32(
            _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi32(v, 8 * t + 4), low4), eight), zz);
        _mm512_store_si512(panel + (j0 + t) * kCols + 16 * half,
                           _mm512_or_si512(_mm512_and_si512(lo, lo16), _mm512_slli_epi32(hi, 16)));
      }
    }
  }
}

// GGUF Q4_K: a 256-element block is 8 groups of 32 (sub-block j: nibble j % 2 of bytes
// 32 (j / 2).. of qs, w = (d sc_j) q - dmin mn_j with q in 0..15); d sc_j and dmin mn_j are exact
// in f32 (11 + 6 bits), so s_w = d sc_j and the min mn = dmin mn_j. Q6_K: 16 groups of 16,
// w = (d sc_j) (q - 32), sc_j int8 (d sc_j exact in f32: 11 + 8 bits), q from 4 low bits of ql
// and 2 high bits of qh (ggml_dequant.h). Q5_K: as Q4_K with a fifth bit from qh (q in 0..31).
enum class GgmlKind { kQ4_0, kQ8_0, kQ4_K, kQ5_K, kQ6_K };

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

template <GgmlKind kKind>
struct GgmlLayout {
  static constexpr bool kQ8 = kKind == GgmlKind::kQ8_0, kQ5K = kKind == GgmlKind::kQ5_K;
  static constexpr bool kQ4K = kKind == GgmlKind::kQ4_K || kQ5K;  // scales and mins as Q4_K's
  static constexpr bool kQ6K = kKind == GgmlKind::kQ6_K, kK = kQ4K || kQ6K;
  static constexpr int64_t kBytes = kQ6K ? 210 : kQ5K ? 176 : kQ4K ? 144 : kQ8 ? 34 : 18;
  static constexpr int64_t kBlock = kK ? 256 : 32;  // elements per block
  // w = s_w (u - kOff) (- mn) for u the unsigned byte of ggml_chunk_u8.
  static constexpr int kOff = kQ8 ? 128 : kQ6K ? 32 : kQ4K ? 0 : 8;
};

// The scales (and Q4_K / Q5_K's mins) of columns [row0, row0 + cols) of block b into sw
// [ng][kCols] (mins: sw + ng kCols); 0 past cols.
template <GgmlKind kKind>
void ggml_scales(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, float* sw) {
  using L = GgmlLayout<kKind>;
  const int64_t rb = p.k / L::kBlock * L::kBytes;  // bytes per weight row
  const int64_t per_block = L::kBlock / p.group;   // groups per block
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  float* mins = sw + p.ng * kCols;
  for (int64_t g = 0; g < p.ng; ++g) {
    for (int c = 0; c < kCols; ++c) {
      float v = 0.0f, mn = 0.0f;
      if (c < cols) {
        const uint8_t* blk = data + c * rb + g / per_block * L::kBytes;
        const int j = static_cast<int>(g % per_block);
        if constexpr (L::kQ4K) {
          int sc, mi;
          k_scale_min(blk + 4, j, &sc, &mi);
          v = f16_at(blk) * static_cast<float>(sc);
          mn = f16_at(blk + 2) * static_cast<float>(mi);
        } else if constexpr (L::kQ6K) {
          v = f16_at(blk + 208) * static_cast<float>(static_cast<int8_t>(blk[192 + j]));
        } else {
          v = f16_at(blk);
        }
      }
      sw[g * kCols + c] = v;
      if constexpr (L::kQ4K) mins[g * kCols + c] = mn;
    }
  }
}

// The 32 elements of chunk cb (of kBlock / 32) of block blk as unsigned bytes: Q4_0 n (w = n -
// 8), Q8_0 q ^ 0x80 (q + 128), Q4_K / Q5_K q, Q6_K q (w = q - 32).
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
  } else if constexpr (L::kQ8) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i nib = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), nib),
                            _mm_and_si128(bytes, nib));
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
  ggml_scales<kKind>(w, p, b, row0, cols, sw);
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
  ggml_scales<kKind>(w, p, b, row0, cols, sw);
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

template <bool kX8>
void tile_rows_t(const Plan& p, int mr, const int32_t* panel, const float* sw, int64_t i0,
                 float* c) {
  const int32_t* xq = p.xq + i0 * p.ldq;
  const float* sx = p.sx + i0 * p.ng;
  const float* xs = p.mins ? p.xs + i0 * p.ng : nullptr;
  const int32_t* xo = kX8 ? p.xo + i0 * p.ng : nullptr;
  switch (mr) {
    case 6: return tile<6, kX8>(p, panel, sw, xq, sx, xs, xo, c);
    case 5: return tile<5, kX8>(p, panel, sw, xq, sx, xs, xo, c);
    case 4: return tile<4, kX8>(p, panel, sw, xq, sx, xs, xo, c);
    case 3: return tile<3, kX8>(p, panel, sw, xq, sx, xs, xo, c);
    case 2: return tile<2, kX8>(p, panel, sw, xq, sx, xs, xo, c);
    default: return tile<1, kX8>(p, panel, sw, xq, sx, xs, xo, c);
  }
}

void tile_rows(const Plan& p, int mr, const int32_t* panel, const float* sw, int64_t i0,
               float* c) {
  if (p.x8) {
    tile_rows_t<true>(p, mr, panel, sw, i0, c);
  } else {
    tile_rows_t<false>(p, mr, panel, sw, i0, c);
  }
}

struct PrepScratch {
  AlignedBuffer<int32_t> xq, xo;
  AlignedBuffer<float> sx, xs;
};

PrepScratch& prep_scratch() {
  thread_local PrepScratch s;
  return s;
}

void prefill_int(Plan& p, IntPackFn pack, const float* x, int64_t ldx, const GemmWeights& w,
                 GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  const int64_t m = p.m;
  PrepScratch& ps = prep_scratch();
  ps.xq.reserve(m * p.ldq);
  ps.sx.reserve(m * p.ng);
  ps.xs.reserve(m * p.ng);
  ps.xo.reserve(m * p.ng);
  p.xq = ps.xq.data();
  p.sx = ps.sx.data();
  p.xs = ps.xs.data();
  p.xo = ps.xo.data();
  const int64_t threads = std::max(1, runner.concurrency());
  {
    const int64_t n_tasks = std::min(threads, m);
    auto prep = [&](int64_t t) {
      for (int64_t i = m * t / n_tasks; i < m * (t + 1) / n_tasks; ++i) {
        prep_row(x + i * ldx, p, ps.xq.data() + i * p.ldq, ps.sx.data() + i * p.ng,
                 ps.xs.data() + i * p.ng, ps.xo.data() + i * p.ng);
      }
    };
    if (n_tasks == 1) {
      prep(0);
    } else {
      runner.run(n_tasks, prep);
    }
  }

  const bool silu = ep == GemmEpilogue::kSiluMul;
  // Units of kCols columns per block (kSiluMul: of the gate block, with the same up columns).
  int64_t first_unit[kMaxGemmBlocks + 1] = {};
  int64_t col0[kMaxGemmBlocks + 1] = {};
  const int n_segments = silu ? 1 : w.n_blocks;
  for (int b = 0; b < n_segments; ++b) {
    first_unit[b + 1] = first_unit[b] + (w.rows[b] + kCols - 1) / kCols;
    col0[b + 1] = col0[b] + w.rows[b];
  }
  const int64_t units = first_unit[n_segments];
  const EpilogueFn epilogue = fma_kernels_avx512().epilogue;
  const int64_t n_tasks = std::min(threads, units);
  auto task = [&](int64_t t) {
    Scratch& s = task_scratch(p);
    int32_t* panels[2] = {s.panel.data(), s.panel.data() + p.k / 2 * kCols};
    float* sws[2] = {s.sw.data(), s.sw.data() + 2 * p.ng * kCols};
    int b = 0;
    for (int64_t u = units * t / n_tasks; u < units * (t + 1) / n_tasks; ++u) {
      while (u >= first_unit[b + 1]) ++b;
      const int64_t row0 = (u - first_unit[b]) * kCols;
      const int cols = static_cast<int>(std::min<int64_t>(kCols, w.rows[b] - row0));
      const int n_src = silu ? 2 : 1;
      for (int j = 0; j < n_src; ++j) {
        pack(w, p, silu ? j : b, row0, cols, s, panels[j], sws[j]);
      }
      for (int64_t i0 = 0; i0 < m; i0 += kMr) {
        const int mr = static_cast<int>(std::min<int64_t>(kMr, m - i0));
        for (int j = 0; j < n_src; ++j) tile_rows(p, mr, panels[j], sws[j], i0, s.c[j]);
        for (int i = 0; i < mr; ++i) {
          float* yi = y + (i0 + i) * ldy;
          if (silu) {
            epilogue(ep, s.c[0] + i * kCols, w.bias[0] ? w.bias[0] + row0 : nullptr,
                     s.c[1] + i * kCols, w.bias[1] ? w.bias[1] + row0 : nullptr, yi + row0, cols);
          } else {
            epilogue(ep, s.c[0] + i * kCols, w.bias[b] ? w.bias[b] + row0 : nullptr, nullptr,
                     nullptr, yi + col0[b] + row0, cols);
          }
        }
      }
    }
  };
  if (n_tasks == 1) {
    task(0);
  } else {
    runner.run(n_tasks, task);
  }
}


// The x8 form of a plan: x rounded to int8 per group, quads of x8 per dword.
void set_x8(Plan& p, int32_t off) {
  p.x8 = true;
  p.xmax = kX8Max;
  p.off = off;
  p.ldq = (p.k / 4 + 15) / 16 * 16;  // pack_ggml_x8 transposes 16 quads at a time
}

}  // namespace

void gemm_quant_i4_vnni_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                                GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  assert(w.dtype == DType::kI4 && m >= 1);
  Plan p;
  p.m = m;
  p.k = w.k;
  p.group = w.group_size;
  p.ng = p.k / p.group;
  p.ldq = p.k / 2;
  p.bf16_scales = w.scale_dtype == DType::kBF16;
  IntPackFn pack = pack_i4;
  if (vnni_prefill_x8()) {
    set_x8(p, 8);
    for (int b = 0; b < w.n_blocks; ++b) p.mins = p.mins || w.zeros[b] != nullptr;
    pack = pack_i4_x8;
  }
  prefill_int(p, pack, x, ldx, w, ep, y, ldy, runner);
}

void gemm_ggml_vnni_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                            GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  const GgmlType t = w.ggml_type;
  assert(w.dtype == DType::kU8 && m >= 1 && w.k % ggml_block_size(t) == 0 &&
         ggml_i16_prefill_type(t));
  Plan p;
  p.m = m;
  p.k = w.k;
  p.group = t == GgmlType::kQ6_K ? 16 : 32;
  p.ng = p.k / p.group;
  p.ldq = p.k / 2;
  p.xmax = 32767.0f;
  p.mins = t == GgmlType::kQ4_K || t == GgmlType::kQ5_K;
  const bool x8 = vnni_prefill_x8();
  IntPackFn pack = nullptr;
  int32_t off = 0;
  auto pick = [&]<GgmlKind kKind>() {
    pack = x8 ? pack_ggml_x8<kKind> : pack_ggml<kKind>;
    off = GgmlLayout<kKind>::kOff;
  };
  switch (t) {
    case GgmlType::kQ8_0: pick.template operator()<GgmlKind::kQ8_0>(); break;
    case GgmlType::kQ4_K: pick.template operator()<GgmlKind::kQ4_K>(); break;
    case GgmlType::kQ5_K: pick.template operator()<GgmlKind::kQ5_K>(); break;
    case GgmlType::kQ6_K: pick.template operator()<GgmlKind::kQ6_K>(); break;
    default: pick.template operator()<GgmlKind::kQ4_0>(); break;
  }
  if (x8) set_x8(p, off);
  prefill_int(p, pack, x, ldx, w, ep, y, ldy, runner);
}

}  // namespace sampan::cpu::gemm_detail
