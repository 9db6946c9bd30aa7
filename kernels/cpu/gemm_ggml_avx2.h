// Helpers shared by the AVX2 GGUF kernels: gemm_ggml_avx2.cc (f32 decoders, the table),
// gemm_ggml_x16_avx2.cc and gemm_ggml_x8_avx2.cc (the integer decode kernels against x rounded to
// 16 bits or to int8).
//
// Include only from translation units compiled with the baseline kernel flags (not *_avx512.cc):
// everything here has internal linkage, so no AVX2 copy is ever merged with an AVX-512 one.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/ggml_block_fields.h"
#include "kernels/cpu/ggml_dequant.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu::gemm_detail {

// Decode kernels against x rounded to 16 bits (gemm_ggml_x16_avx2.cc): sets the table entries of
// Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (their dot
// kernels only; dequant stays the f32 decoders').
void set_x16_kernels_avx2(GgmlKernels& t);
// Decode kernels against x rounded to int8 (gemm_ggml_x8_avx2.cc; GemmPrecision::kBf16): sets
// the dot_x8 entries of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS.
void set_x8_kernels_avx2(GgmlKernels& t);
// The x16 decode kernel of Q2_K (gemm_ggml_x8_avx2.cc: x16 as two byte planes, the codes as
// bytes); an empty table for every other type.
GgmlDotTable ggml_x16_planes_dot_avx2(GgmlType type);

namespace {

constexpr int kRows = 4;
static_assert(kRows <= kGgmlMaxRows);

// Software prefetch distance: the same position in the rows 1.5 calls ahead, as in
// gemm_ggml_avx512.cc (which says why and what it measured).
// ---- Dispatch of the integer decode kernels (x16 and x8 files) ----

// Rows of x per call of those kernels.
constexpr int kIntDotMaxM = 4;
// A kernel's instances for 1..kIntDotMaxM rows of x; by_rows_of_x calls the one for mb.
using IntDotFn = void (*)(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                          float* out);
using IntDotFns = IntDotFn[kIntDotMaxM];

template <const IntDotFns& kFns>
void by_rows_of_x(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb,
                  float* out) {
  kFns[std::min(mb, kIntDotMaxM) - 1](rows, k, x, ldx, out);
}

// kVnni's instances (VEX vpdpwssd, where has_vex_vnni()) or kPlain's: asked per call by `dot`,
// once per GEMM by `resolve` (tests change the level between calls).
template <const IntDotFns& kPlain, const IntDotFns& kVnni>
struct ByLevel {
  static GgmlDotFn resolve() {
    return has_vex_vnni() ? by_rows_of_x<kVnni> : by_rows_of_x<kPlain>;
  }
  static void dot(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb,
                  float* out) {
    resolve()(rows, k, x, ldx, mb, out);
  }
};

inline int64_t prefetch_ahead(int64_t row_bytes) {
  return 3 * row_bytes / 2;
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The f16 at p in all 8 lanes.
inline __m256 f16_broadcast(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(h)));
}

inline __m128i load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline float hsum(__m256 v) { return Avx2::reduce_add(v); }

// 32 six-bit codes minus 32, as signed bytes: elements 32 c .. 32 c + 31 of a Q6_K block p
// (the same as gemm_ggml_avx512.cc's; see the shift argument there).
inline __m256i q6_codes(const uint8_t* p, int c) {
  const int a = c / 4, s = c % 4;
  __m256i lo = load32(p + 64 * a + 32 * (s & 1));
  if (s >> 1) lo = _mm256_srli_epi16(lo, 4);
  lo = _mm256_and_si256(lo, _mm256_set1_epi8(0x0f));
  __m256i hi = load32(p + 128 + 32 * a);
  hi = s == 3 ? _mm256_srli_epi16(hi, 2) : _mm256_sll_epi16(hi, _mm_cvtsi32_si128(4 - 2 * s));
  hi = _mm256_and_si256(hi, _mm256_set1_epi8(0x30));
  return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
}

}  // namespace
}  // namespace sampan::cpu::gemm_detail
