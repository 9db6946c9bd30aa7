// bias_activation_rows on 16 lanes (bias_activation_avx512.h): activation_impl.h's activate over
// vec_avx512.h's Avx512, the same vec_math functions as the 8-lane form and so the same bits: a
// GELU epilogue costs half the instructions it did on 8 lanes (BERT-base bf16: that epilogue was
// 7 % of a run) and changes no result.
// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized on their own pass-through operands
// (GCC bug 105593); silenced before the headers are read, as in gemm_avx512.cc.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/cpu/bias_activation_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/activation_impl.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu::detail {

void bias_activation_rows_avx512(int64_t rows, int64_t n, float* y, int64_t ldy, float alpha,
                                 const float* bias, Activation act) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ldy;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row + i), va);
      if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
      _mm512_storeu_ps(row + i, vec_math::activate<Avx512>(v, act));
    }
    if (i < n) {
      const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + i), va);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
      _mm512_mask_storeu_ps(row + i, m, vec_math::activate<Avx512>(v, act));
    }
  }
}

}  // namespace sampan::cpu::detail
