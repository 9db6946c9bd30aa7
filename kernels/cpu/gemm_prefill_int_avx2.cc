// The integer prefill of gemm_prefill_int_avx512_vnni.cc on CPUs without AVX-512 (and AVX-512
// CPUs lowered to avx2 / avx2_vnni), on 8-lane vectors. With AVX-VNNI (Alder Lake and later
// client cores, Sierra Forest): the VEX forms of vpdpwssd (x16, the default: 16 products per
// instruction against an FMA's 8) and vpdpbusd (x8 with GemmPrecision::kBf16: 32). Without it
// (Haswell to Skylake client, AMD Zen 1-3): vpmaddwd + vpaddd for x16 (16 products in two
// instructions that issue on more ports than the two FMA pipes: on Intel cores the pair shares
// three vector ports, at most 1.5x an FMA's products; Zen 3 issues vpmaddwd on two pipes and the
// adds on the other two) and, for x8, vpmaddubsw + vpaddw into int16 sums widened every few
// steps (x8_group_sums_madd; codes up to 31) or vpmaddubsw + vpmaddwd + vpaddd per step
// (vec_avx2.h dpbusd_acc; Q6_K). vpmaddubsw's int16 sums stay exact for unsigned codes up to
// 129: every kI4 and GGUF kind but Q8_0, which rounds x to x16 there instead
// (ggml_prefill_x8). The same int32 sums, so the same results, at every level. Same formats,
// roundings, bounds and driver (gemm_prefill_int_common.h); what differs from the AVX-512 file is
// the width:
//  - a unit is 16 output columns (two vectors), the panel [k / 2][16] (x16) or [k / 4][16] (x8)
//    dwords, packed 8 columns at a time through an 8 x 8 dword transpose of one 8-dword run of
//    each column (8 pairs or 8 quads; a GGUF 32-element chunk as unsigned bytes from
//    ggml_chunk_u8);
//  - 16 vector registers: a tile of 6 rows keeps its 12 integer group sums in registers with the
//    two panel vectors and the broadcast x, and its f32 totals in L1 (c), read and written once
//    per group.
// Measured on the Emerald Rapids VM lowered to avx2_vnni (SAMPAN_CPU_ISA=avx2_vnni) against the
// f32 FMA panels the level ran before (bench_gemm_quant gemm --format int4g128, m = 512, one
// core): 66-73 GFLOP/s -> 146-156 (x16), 249-279 (x8); sampan bench prefill 512, int4 g128, 2
// threads: 73 -> 135 tok/s (x16), 220 (x8); GGUF Q8_0 73 -> 124 / 188, Q4_K_M 74 -> 118 / 172.
// Lowered to avx2 (no VNNI), against the f32 panels (SAMPAN_GEMM_PRECISION=f32) alternating:
// bench_gemm_ggml --m 512, one core, 3 rounds: x16 Q4_0 / Q8_0 / Q4_K 100-107 against 57-73
// GFLOP/s, Q6_K (groups of 16: the f32 epilogue per group weighs more) 73-90 against 57-73; x8
// 97-130 (one round 55-69). The int16 sums (tile kSums16), against the per-step widening
// alternating, kBf16, 4 rounds: Q4_0 129-131 -> 145-170, Q4_K 110-118 -> 130-147 (one
// widening per group), Q5_K 84-116 -> 105-115, int4 g128 147-154 -> 186-193 (widened every 4 or
// 8 steps); sampan bench prefill 512 (2 threads, 2 rounds) Q4_0 104-110 -> 120-136 tok/s,
// Q4_K_M 93-99 -> 117-120, int4 g128 125-135 -> 134-149. Against the f32 panels, sampan bench
// prefill 512, 2 threads, 2 rounds, before the int16 sums: int4 g128 63-65 -> 103-112 tok/s
// (x16), 123-129 (x8); Q4_0 63-69 -> 87-96 / 117-119; Q4_K_M 63-72 -> 80-94 / 102-106; Q8_0
// 66-72 -> 94-98 (x16 both ways). The same tile through intrinsics ran x16 at the
// f32 panels' speed: GCC hoisted the 12 products of a step ahead of their adds and kept the
// accumulators on the stack.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/gemm_prefill_int_common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kCols = 16;  // output columns per unit / panel (two vectors of 8 lanes)
constexpr int kMr = 6;     // rows of x per micro-tile

// As i4_x_group_scale (gemm_quant.h): s_x = absmax / xmax and 1 / s_x = xmax / absmax as f32
// divisions; a group holding a NaN or an infinity gets s_x = NaN.
inline void group_scale(const float* x, int64_t n, float xmax, float* sx, float* inv) {
  const AbsMax a = absmax_avx2(x, n);
  *sx = 0.0f;
  *inv = 0.0f;
  if (!a.finite) {
    *sx = std::numeric_limits<float>::quiet_NaN();
  } else if (a.value > 0.0f) {
    *sx = a.value / xmax;
    *inv = xmax / a.value;
  }
}

// As the AVX-512 prep_row: s_x, x16 (x8) in element order, xs and xo per group.
void prep_row(const float* x, const Plan& p, int32_t* xq, float* sx, float* xs, int32_t* xo) {
  auto* x8 = reinterpret_cast<int8_t*>(xq);
  auto* x16 = reinterpret_cast<int16_t*>(xq);
  for (int64_t g = 0; g < p.ng; ++g) {
    float s, inv;
    group_scale(x + g * p.group, p.group, p.xmax, &s, &inv);
    zero_if_inverse_overflows(&s, &inv);  // absmax below ~2^-113 (x16), ~2^-121 (x8)
    sx[g] = s;
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i sum = _mm256_setzero_si256();
    for (int64_t c = g * p.group; c < (g + 1) * p.group; c += 16) {
      const __m256i a0 = round_scaled_epi32(x + c, vinv);
      const __m256i a1 = round_scaled_epi32(x + c + 8, vinv);
      sum = _mm256_add_epi32(sum, _mm256_add_epi32(a0, a1));
      // |x16| <= xmax: the saturating packs are exact (a NaN group's values are don't-cares).
      const __m256i h = _mm256_permute4x64_epi64(_mm256_packs_epi32(a0, a1), 0xd8);
      if (p.x8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(x8 + c),
                         _mm_packs_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h,
                         1)));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(x16 + c), h);
      }
    }
    // A NaN group converts to INT_MIN lanes: its sum is a don't-care (s_x is NaN), taken as 0
    // so that -off * total cannot overflow.
    const int32_t total = std::isnan(s) ? 0 : hsum_epi32(sum);
    if (p.mins) xs[g] = s * static_cast<float>(total);
    if (p.x8) xo[g] = -p.off * total;
  }
}

// Stores v[0..8) (one 8-dword run per column of a half, columns from n on zero) transposed into
// panel rows row0 .. row0 + 7, lanes 8 half .. 8 half + 7.
inline void store_transposed(__m256i v[8], int32_t* panel, int64_t row0, int half) {
  transpose8_epi32(v);
  for (int j = 0; j < 8; ++j) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(panel + (row0 + j) * kCols + 8 * half), v[j]);
  }
}

// kI4, x16: 8 bytes (8 pairs) of each column, q - z as int16 pairs (two's complement nibble n:
// q = (n ^ 8) - 8).
void pack_i4(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
             int32_t* panel, float* sw) {
  const int64_t rb = p.k / 2;
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  i4_scales<kCols>(w, p, b, row0, cols, s, sw);
  const __m256i low4 = _mm256_set1_epi32(0xf), eight = _mm256_set1_epi32(8);
  const __m256i lo16 = _mm256_set1_epi32(0xffff);
  for (int half = 0; half < 2; ++half) {
    for (int64_t j0 = 0; j0 < rb; j0 += 8) {  // bytes j0..j0+7: pairs j0..j0+7
      const int64_t g = 2 * j0 / p.group;     // groups hold >= 16 pairs
      __m256i v[8];
      for (int c = 0; c < 8; ++c) {
        const int col = 8 * half + c;
        if (col >= cols) {
          v[c] = _mm256_setzero_si256();
          continue;
        }
        const __m256i zz = _mm256_set1_epi32(s.zz.data()[g * kCols + col]);
        const __m256i u = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + col * rb + j0)));
        const __m256i lo = _mm256_sub_epi32(_mm256_xor_si256(_mm256_and_si256(u, low4), eight), zz);
        const __m256i hi = _mm256_sub_epi32(
            _mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi32(u, 4), low4), eight), zz);
        v[c] = _mm256_or_si256(_mm256_and_si256(lo, lo16), _mm256_slli_epi32(hi, 16));
      }
      store_transposed(v, panel, j0, half);
    }
  }
}

// kI4, x8: 16 bytes (32 elements, 8 quads) of each column, nibbles spread one per byte in
// element order and turned to u = q + 8 (n ^ 8).
void pack_i4_x8(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
                int32_t* panel, float* sw) {
  const int64_t rb = p.k / 2;
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  i4_scales<kCols>(w, p, b, row0, cols, s, sw);
  const __m128i nib = _mm_set1_epi8(0x0f), eights = _mm_set1_epi8(0x08);
  for (int half = 0; half < 2; ++half) {
    for (int64_t j0 = 0; j0 < rb; j0 += 16) {  // bytes j0..j0+15: quads j0 / 2 .. j0 / 2 + 7
      __m256i v[8];
      for (int c = 0; c < 8; ++c) {
        const int col = 8 * half + c;
        if (col >= cols) {
          v[c] = _mm256_setzero_si256();
          continue;
        }
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + col * rb +
        j0));
        const __m128i lo = _mm_xor_si128(_mm_and_si128(bytes, nib), eights);
        const __m128i hi = _mm_xor_si128(_mm_and_si128(_mm_srli_epi16(bytes, 4), nib), eights);
        v[c] = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
      }
      store_transposed(v, panel, j0 / 2, half);
    }
  }
}

// GGUF: per 32-element chunk of each column, its unsigned bytes (ggml_chunk_u8): x8 takes them
// as 8 quads; x16 widens them to int16 minus the format's offset, two runs of 8 pairs.
template <GgmlKind kKind, bool kX8>
void pack_ggml(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch&,
               int32_t* panel, float* sw) {
  using L = GgmlLayout<kKind>;
  const int64_t rb = p.k / L::kBlock * L::kBytes;
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  ggml_scales<kKind, kCols>(w, p, b, row0, cols, sw);
  const __m256i off = _mm256_set1_epi16(L::kOff);
  for (int half = 0; half < 2; ++half) {
    for (int64_t ch = 0; ch < p.k / 32; ++ch) {
      __m256i u[8];
      for (int c = 0; c < 8; ++c) {
        const int col = 8 * half + c;
        u[c] = col >= cols ? _mm256_setzero_si256()
                           : ggml_chunk_u8<kKind>(
                                 data + col * rb + ch * 32 / L::kBlock * L::kBytes,
                                 ch % (L::kBlock / 32));
      }
      if constexpr (kX8) {
        store_transposed(u, panel, ch * 8, half);
      } else {
        __m256i v[8];
        for (int t = 0; t < 2; ++t) {  // elements 16 t .. 16 t + 15: pairs 16 ch + 8 t ..
          for (int c = 0; c < 8; ++c) {
            const __m128i q = t ? _mm256_extracti128_si256(u[c], 1) : _mm256_castsi256_si128(u[c]);
            v[c] = 8 * half + c >= cols ? _mm256_setzero_si256()
                                        : _mm256_sub_epi16(_mm256_cvtepu8_epi16(q), off);
          }
          store_transposed(v, panel, ch * 16 + 8 * t, half);
        }
      }
    }
  }
}

// acc16 += the products of the unsigned bytes u and the signed bytes x summed by 2, in int16
// lanes (vpmaddubsw, vpaddw; saturating, so only while every lane's running sum fits int16).
inline void maddubs_acc16(__m256i& acc16, __m256i u, __m256i x) {
  __m256i t;
  asm("vpmaddubsw %3, %2, %1\n\tvpaddw %1, %0, %0" : "+x"(acc16), "=&x"(t) : "x"(u), "x"(x));
}

// How many x8 steps (quads) vpmaddubsw's int16 sums may add up before they are widened: the
// largest power of two dividing a group's `steps` with 2 umax 127 per step still in int16
// (umax 15: 8 steps, 30480; 31: 4; 63: 2; above 129 none, which the callers exclude).
inline int64_t x8_steps_in_int16(int32_t umax, int64_t steps) {
  assert(umax <= 129);
  int64_t f = 1;
  while (2 * f <= steps && steps % (2 * f) == 0 && 2 * umax * 127 * (2 * f) <= 32767) f *= 2;
  return f;
}

// Steps [j0, j1) of a group's x8 panel pw against rows px (stride ldq) into the int16 sums a.
template <int MR>
inline void x8_steps_int16(const int32_t* pw, const int32_t* px, int64_t ldq, int64_t j0,
                           int64_t j1, __m256i (&a)[MR][2]) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) a[i][0] = a[i][1] = _mm256_setzero_si256();
  for (int64_t j = j0; j < j1; ++j) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw + j * kCols));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw + j * kCols + 8));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256i xb = _mm256_set1_epi32(px[i * ldq + j]);
      maddubs_acc16(a[i][0], w0, xb);
      maddubs_acc16(a[i][1], w1, xb);
    }
  }
}

// The x8 group sums without VNNI (into acc [MR][2][8], starting from xo): per step one
// vpmaddubsw + vpaddw per vector into int16 sums, widened by vpmaddwd against ones and added to
// acc every `flush` steps. Against vpmaddubsw + vpmaddwd + vpaddd per step (dpbusd_acc): 2
// instructions per 32 products instead of 3, and one multiply instead of two. The same int32
// sums as vpdpbusd as long as the int16 sums do not saturate (x8_steps_in_int16).
template <int MR>
void x8_group_sums_madd(const int32_t* pw, const int32_t* px, int64_t ldq, int64_t steps,
                        int64_t flush, const int32_t* xo, int64_t ng, int32_t (*acc)[2][8]) {
  for (int i = 0; i < MR; ++i) {
    const __m256i o = _mm256_set1_epi32(xo[i * ng]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc[i][0]), o);
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc[i][1]), o);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t j0 = 0; j0 < steps; j0 += flush) {
    __m256i a[MR][2];
    x8_steps_int16<MR>(pw, px, ldq, j0, j0 + flush, a);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < 2; ++v) {
        auto* d = reinterpret_cast<__m256i*>(acc[i][v]);
        _mm256_store_si256(d, _mm256_add_epi32(_mm256_load_si256(d),
                                               _mm256_madd_epi16(a[i][v], ones)));
      }
    }
  }
}

// x8_group_sums_madd takes formats that add at least this many steps in int16 (codes up to 31:
// kI4, Q4_0, Q4_K, Q5_K); Q6_K (2 steps) keeps dpbusd_acc. bench_gemm_ggml --isa avx2 --m 512,
// one core, kBf16, 3 rounds: Q5_K (4 steps) 83-113 -> 102-126 GFLOP/s; Q6_K at 2 steps
// 62-93 against 74-100.
constexpr int64_t kMinFlush = 4;

// As the AVX-512 tile, with the f32 totals in c (L1). kVnni: acc += pairwise int16 products
// (x16) / 4 u8 x s8 products per lane (x8) in the VEX VNNI forms, in asm so that the
// accumulators stay in place (see the AVX-512 file); else the AVX2 sequences of vec_avx2.h.
// kSums16 (x8 without VNNI where the int16 sums take at least kMinFlush steps): 1, the group
// sums of x8_group_sums_madd, widened into memory every few steps; 2, a group whose steps all
// fit the int16 sums (groups of 32 of codes up to 15: kI4 g32, Q4_0, Q4_K), widened once,
// straight into the epilogue's registers. A template parameter, since the mere presence of
// path 1 (its accumulators in memory) made GCC keep the other tiles' accumulators on the stack
// too (x16 prefill 0.58x).
template <int MR, bool kX8, bool kVnni, int kSums16>
void tile(const Plan& p, const int32_t* panel, const float* sw, const int32_t* xq,
          const float* sx, const float* xs, const int32_t* xo, float* c) {
  static_assert(kSums16 == 0 || (kX8 && !kVnni));
  const int64_t steps = p.group / (kX8 ? 4 : 2);
  for (int i = 0; i < MR * kCols; i += 8) _mm256_store_ps(c + i, _mm256_setzero_ps());
  for (int64_t g = 0; g < p.ng; ++g) {
    __m256i s[MR][2];
    const int32_t* pw = panel + g * steps * kCols;
    const int32_t* px = xq + g * steps;
    if constexpr (kSums16 == 2) {
      __m256i a[MR][2];
      x8_steps_int16<MR>(pw, px, p.ldq, 0, steps, a);
      const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256i o = _mm256_set1_epi32(xo[i * p.ng + g]);
        s[i][0] = _mm256_add_epi32(o, _mm256_madd_epi16(a[i][0], ones));
        s[i][1] = _mm256_add_epi32(o, _mm256_madd_epi16(a[i][1], ones));
      }
    } else {
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        s[i][0] = s[i][1] = kX8 ? _mm256_set1_epi32(xo[i * p.ng + g]) : _mm256_setzero_si256();
      }
    }
    if constexpr (kSums16 == 1) {
      alignas(32) int32_t acc[MR][2][8];
      x8_group_sums_madd<MR>(pw, px, p.ldq, steps, x8_steps_in_int16(p.umax, steps), xo + g,
                             p.ng, acc);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        s[i][0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc[i][0]));
        s[i][1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc[i][1]));
      }
    }
    for (int64_t j = 0; j < (kSums16 ? 0 : steps); ++j) {  // kSums16: done above
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw + j * kCols));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pw + j * kCols + 8));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256i xb = _mm256_set1_epi32(px[i * p.ldq + j]);
        if constexpr (kX8) {
          dpbusd_acc<kVnni>(s[i][0], w0, xb);
          dpbusd_acc<kVnni>(s[i][1], w1, xb);
        } else {
          madd_acc<kVnni>(s[i][0], xb, w0);
          madd_acc<kVnni>(s[i][1], xb, w1);
        }
      }
    }
    const __m256 sw0 = _mm256_load_ps(sw + g * kCols), sw1 = _mm256_load_ps(sw + g * kCols + 8);
    const float* mn = sw + (p.ng + g) * kCols;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 f = _mm256_set1_ps(sx[i * p.ng + g]);
      float* ci = c + i * kCols;
      __m256 a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][0]), _mm256_mul_ps(sw0, f),
                                  _mm256_load_ps(ci));
      __m256 a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i][1]), _mm256_mul_ps(sw1, f),
                                  _mm256_load_ps(ci + 8));
      if (p.mins) {  // minus mn times the group's sum of x
        const __m256 t = _mm256_set1_ps(xs[i * p.ng + g]);
        a0 = _mm256_fnmadd_ps(_mm256_load_ps(mn), t, a0);
        a1 = _mm256_fnmadd_ps(_mm256_load_ps(mn + 8), t, a1);
      }
      _mm256_store_ps(ci, a0);
      _mm256_store_ps(ci + 8, a1);
    }
  }
}

template <bool kVnni>
struct Avx2IntKernel {
  static constexpr int kCols = gemm_detail::kCols, kMr = gemm_detail::kMr;
  static void prep_row(const float* x, const Plan& p, int32_t* xq, float* sx, float* xs,
                       int32_t* xo) {
    gemm_detail::prep_row(x, p, xq, sx, xs, xo);
  }
  template <int MR, bool kX8>
  static void tile(const Plan& p, const int32_t* panel, const float* sw, const int32_t* xq,
                   const float* sx, const float* xs, const int32_t* xo, float* c) {
    if constexpr (kX8 && !kVnni) {
      const int64_t steps = p.group / 4, flush = x8_steps_in_int16(p.umax, steps);
      if (flush == steps) {
        return gemm_detail::tile<MR, true, false, 2>(p, panel, sw, xq, sx, xs, xo, c);
      }
      if (flush >= kMinFlush) {
        return gemm_detail::tile<MR, true, false, 1>(p, panel, sw, xq, sx, xs, xo, c);
      }
    }
    gemm_detail::tile<MR, kX8, kVnni, 0>(p, panel, sw, xq, sx, xs, xo, c);
  }
  static EpilogueFn epilogue() { return fma_kernels_avx2().epilogue; }
  static IntPackFn i4_pack(bool x8) { return x8 ? pack_i4_x8 : pack_i4; }
  template <GgmlKind kKind>
  static IntPackFn ggml_pack(bool x8) {
    // Q8_0's and the IQ4 kinds' u pass 129: vpmaddubsw would saturate (ggml_prefill_x8 keeps
    // them at x16).
    assert(kVnni || !x8 || GgmlLayout<kKind>::kMaxU <= 129);
    return x8 ? pack_ggml<kKind, true> : pack_ggml<kKind, false>;
  }
};

}  // namespace

void gemm_quant_i4_avx2_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                                GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  if (has_vex_vnni()) {
    i4_prefill<Avx2IntKernel<true>>(m, x, ldx, w, ep, y, ldy, runner);
  } else {
    i4_prefill<Avx2IntKernel<false>>(m, x, ldx, w, ep, y, ldy, runner);
  }
}

void gemm_ggml_avx2_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                            GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  if (has_vex_vnni()) {
    ggml_prefill<Avx2IntKernel<true>>(m, x, ldx, w, ep, y, ldy, runner);
  } else {
    ggml_prefill<Avx2IntKernel<false>>(m, x, ldx, w, ep, y, ldy, runner);
  }
}

}  // namespace sampan::cpu::gemm_detail
