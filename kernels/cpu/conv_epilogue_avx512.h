// The conv GEMM tiles' output write on AVX-512 (conv_avx512.cc f32, conv_bf16_avx512.cc bf16):
// include only from files compiled for AVX-512. One row of 32 outputs: add what is already there
// (a later k chunk), then on the last chunk bias, residual and the activation, all in registers.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/conv_cpu.h"

namespace sampan::cpu::conv_detail {

inline __m512 activate_avx512(__m512 v, const ConvEpilogue& ep) {
  switch (ep.act) {
    case ConvActivation::kNone:
    case ConvActivation::kSigmoid:  // applied by the driver after the store
      return v;
    case ConvActivation::kRelu: return _mm512_max_ps(v, _mm512_setzero_ps());
    case ConvActivation::kClip:
      return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ep.act_min)),
                           _mm512_set1_ps(ep.act_max));
    case ConvActivation::kHardSwish: {
      __m512 g = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
      g = _mm512_min_ps(_mm512_max_ps(g, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
      return _mm512_mul_ps(v, g);
    }
  }
  return v;
}

// ci: [32] the output row; res: [32] the residual row or null; bias: this row's bias or null.
inline void store_row_avx512(float* ci, __m512 v0, __m512 v1, bool accumulate, bool last,
                             const float* bias, const float* res, const ConvEpilogue& ep) {
  if (accumulate) {
    v0 = _mm512_add_ps(v0, _mm512_loadu_ps(ci));
    v1 = _mm512_add_ps(v1, _mm512_loadu_ps(ci + 16));
  }
  if (last) {
    if (bias) {
      const __m512 bv = _mm512_set1_ps(*bias);
      v0 = _mm512_add_ps(v0, bv);
      v1 = _mm512_add_ps(v1, bv);
    }
    if (res) {
      v0 = _mm512_add_ps(v0, _mm512_loadu_ps(res));
      v1 = _mm512_add_ps(v1, _mm512_loadu_ps(res + 16));
    }
    v0 = activate_avx512(v0, ep);
    v1 = activate_avx512(v1, ep);
  }
  _mm512_storeu_ps(ci, v0);
  _mm512_storeu_ps(ci + 16, v1);
}

}  // namespace sampan::cpu::conv_detail
