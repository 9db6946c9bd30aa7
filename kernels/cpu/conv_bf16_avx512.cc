// The bf16 register tile of the conv GEMM path (conv_cpu.h, conv_detail::Bf16Kernels) and its
// two B packers, for CPUs with AVX512-BF16 (vdpbf16ps). 8 output channels x 32 pixels with 16
// zmm f32 accumulators, like the f32 tile (conv_avx512.cc); each vdpbf16ps consumes two k steps,
// so one pair row of B (64 bf16, two zmm) feeds 16 instructions doing the work of 32 FMAs.
// GCC 12's _mm512_undefined_ps (inside max/min) trips -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// Beyond the file's avx512 level (CMakeLists.txt): everything here is only called when
// cpu_features().avx512_bf16 (conv_cpu.cc, bf16_native_ok).
#pragma GCC target("avx512bf16")
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/conv_epilogue_avx512.h"

namespace sampan::cpu::conv_detail {
namespace {

constexpr int kMr = 8;
constexpr int kNr = 32;

// A pair (a[k], a[k + 1]) of one weight row as the 32-bit lane vdpbf16ps broadcasts. Rows of an
// odd k start at odd elements, hence memcpy (an unaligned load).
inline __m512bh pair_at(const uint16_t* a) {
  int32_t v;
  std::memcpy(&v, a, sizeof(v));
  return (__m512bh)_mm512_set1_epi32(v);
}

template <int M>
void tile(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, float* c, int64_t ldc,
          bool accumulate, bool last, const float* bias, const float* res,
          const ConvEpilogue* ep) {
  __m512 acc0[M];
  __m512 acc1[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const uint16_t* ar[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) ar[i] = a + i * lda;
  const int64_t pairs = kc / 2;
#pragma GCC unroll 2
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + p * 2 * kNr);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(bp + p * 2 * kNr + 32);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512bh av = pair_at(ar[i] + 2 * p);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
  }
  if (kc % 2 != 0) {
    // The odd last k: its B pair row holds (b, 0), and A's pair is (a, 0) so that nothing past
    // the row is read.
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + pairs * 2 * kNr);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(bp + pairs * 2 * kNr + 32);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(ar[i][kc - 1]));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], av, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], av, b1);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    store_row_avx512(c + i * ldc, acc0[i], acc1[i], accumulate, last, bias ? bias + i : nullptr,
                     res ? res + i * ldc : nullptr, *ep);
  }
}

void tile_any(int m, int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, float* c,
              int64_t ldc, bool accumulate, bool last, const float* bias, const float* res,
              const ConvEpilogue* ep) {
  switch (m) {
    case 8: tile<8>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 7: tile<7>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 6: tile<6>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 5: tile<5>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 4: tile<4>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 3: tile<3>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 2: tile<2>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    default: tile<1>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
  }
}

// Interleaves two rows of 32 bf16 into pairs: out[2j] = r0[j], out[2j + 1] = r1[j].
inline void interleave_store(__m512i r0, __m512i r1, uint16_t* dst) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                      8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  _mm512_store_si512(dst, _mm512_permutex2var_epi16(r0, lo, r1));
  _mm512_store_si512(dst + 32, _mm512_permutex2var_epi16(r0, hi, r1));
}

// 32 floats rounded to bf16 (nearest even), in order.
inline __m512i round_row(const float* src) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(src + 16), _mm512_load_ps(src));
}

void pack_f32(const float* src, int64_t kc, uint16_t* dst) {
  const int64_t pairs = kc / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    interleave_store(round_row(src + 2 * p * kNr), round_row(src + (2 * p + 1) * kNr),
                     dst + p * 2 * kNr);
  }
  if (kc % 2 != 0) {
    interleave_store(round_row(src + (kc - 1) * kNr), _mm512_setzero_si512(),
                     dst + pairs * 2 * kNr);
  }
}

void pack_bf16(const uint16_t* src, int64_t ld, int64_t kc, int64_t ncols, uint16_t* dst) {
  const __mmask32 mask = ncols >= kNr ? ~__mmask32{0} : (__mmask32{1} << ncols) - 1;
  const int64_t pairs = kc / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512i r0 = _mm512_maskz_loadu_epi16(mask, src + 2 * p * ld);
    const __m512i r1 = _mm512_maskz_loadu_epi16(mask, src + (2 * p + 1) * ld);
    interleave_store(r0, r1, dst + p * 2 * kNr);
  }
  if (kc % 2 != 0) {
    interleave_store(_mm512_maskz_loadu_epi16(mask, src + (kc - 1) * ld), _mm512_setzero_si512(),
                     dst + pairs * 2 * kNr);
  }
}

void pack_f32_rows(const float* src, int64_t ld, int64_t kc, int64_t ncols, uint16_t* dst) {
  const __mmask16 m0 = ncols >= 16 ? __mmask16(0xffff) : __mmask16((1u << ncols) - 1);
  const __mmask16 m1 = ncols >= kNr ? __mmask16(0xffff)
                       : ncols <= 16 ? __mmask16(0)
                                     : __mmask16((1u << (ncols - 16)) - 1);
  const auto row = [&](const float* r) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, r + 16),
                                        _mm512_maskz_loadu_ps(m0, r));
  };
  const int64_t pairs = kc / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    interleave_store(row(src + 2 * p * ld), row(src + (2 * p + 1) * ld), dst + p * 2 * kNr);
  }
  if (kc % 2 != 0) {
    interleave_store(row(src + (kc - 1) * ld), _mm512_setzero_si512(), dst + pairs * 2 * kNr);
  }
}

}  // namespace

Bf16Kernels bf16_kernels_avx512() {
  return {.mr = kMr, .nr = kNr, .fn = tile_any, .pack_f32 = pack_f32, .pack_bf16 = pack_bf16,
          .pack_f32_rows = pack_f32_rows};
}

}  // namespace sampan::cpu::conv_detail
