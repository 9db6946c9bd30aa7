// The AVX-512 register tile of the conv GEMM path (conv_cpu.h, conv_detail): 8 output channels
// x 32 pixels, 16 zmm accumulators. Eight rows divide every channel count of the common CNNs, so
// the narrower tails (template M < 8) are rare; 32 columns keep the tails of small planes
// (7x7 = 49 pixels) at two tiles.
// GCC 12's _mm512_undefined_ps (inside max/min) trips -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/conv_epilogue_avx512.h"

namespace sampan::cpu::conv_detail {
namespace {

constexpr int kMr = 8;
constexpr int kNr = 32;

template <int M>
void tile(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
          bool accumulate, bool last, const float* bias, const float* res,
          const ConvEpilogue* ep) {
  __m512 acc0[M];
  __m512 acc1[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const float* ar[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) ar[i] = a + i * lda;
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(bp + k * kNr);
    const __m512 b1 = _mm512_load_ps(bp + k * kNr + 16);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 av = _mm512_set1_ps(ar[i][k]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    store_row_avx512(c + i * ldc, acc0[i], acc1[i], accumulate, last, bias ? bias + i : nullptr,
                     res ? res + i * ldc : nullptr, *ep);
  }
}

void tile_any(int m, int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
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

}  // namespace

MicroKernel micro_kernel_avx512() { return {kMr, kNr, tile_any}; }

}  // namespace sampan::cpu::conv_detail
