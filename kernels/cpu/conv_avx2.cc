// The AVX2 register tile of the conv GEMM path (conv_cpu.h, conv_detail): 6 output channels
// x 16 pixels, 12 ymm accumulators (of 16 registers: two for the packed input row, one for the
// broadcast weight).
#include <immintrin.h>

#include "kernels/cpu/conv_cpu.h"

namespace sampan::cpu::conv_detail {
namespace {

constexpr int kMr = 6;
constexpr int kNr = 16;

inline __m256 activate(__m256 v, const ConvEpilogue& ep) {
  switch (ep.act) {
    case ConvActivation::kNone:
    case ConvActivation::kSigmoid:  // applied by the driver after the store
      return v;
    case ConvActivation::kRelu: return _mm256_max_ps(v, _mm256_setzero_ps());
    case ConvActivation::kClip:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.act_min)),
                           _mm256_set1_ps(ep.act_max));
    case ConvActivation::kHardSwish: {
      __m256 g = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
      g = _mm256_min_ps(_mm256_max_ps(g, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
      return _mm256_mul_ps(v, g);
    }
  }
  return v;
}

template <int M>
void tile(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
          bool accumulate, bool last, const float* bias, const float* res,
          const ConvEpilogue* ep) {
  __m256 acc0[M];
  __m256 acc1[M];
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  const float* ar[M];
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) ar[i] = a + i * lda;
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(bp + k * kNr);
    const __m256 b1 = _mm256_load_ps(bp + k * kNr + 8);
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      const __m256 av = _mm256_broadcast_ss(ar[i] + k);
      acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) {
    float* ci = c + i * ldc;
    __m256 v0 = acc0[i];
    __m256 v1 = acc1[i];
    if (accumulate) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ci));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ci + 8));
    }
    if (last) {
      if (bias) {
        const __m256 bv = _mm256_set1_ps(bias[i]);
        v0 = _mm256_add_ps(v0, bv);
        v1 = _mm256_add_ps(v1, bv);
      }
      if (res) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(res + i * ldc));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(res + i * ldc + 8));
      }
      v0 = activate(v0, *ep);
      v1 = activate(v1, *ep);
    }
    _mm256_storeu_ps(ci, v0);
    _mm256_storeu_ps(ci + 8, v1);
  }
}

void tile_any(int m, int64_t kc, const float* a, int64_t lda, const float* bp, float* c,
              int64_t ldc, bool accumulate, bool last, const float* bias, const float* res,
              const ConvEpilogue* ep) {
  switch (m) {
    case 6: tile<6>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 5: tile<5>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 4: tile<4>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 3: tile<3>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    case 2: tile<2>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
    default: tile<1>(kc, a, lda, bp, c, ldc, accumulate, last, bias, res, ep); return;
  }
}

}  // namespace

MicroKernel micro_kernel_avx2() { return {kMr, kNr, tile_any}; }

}  // namespace sampan::cpu::conv_detail
