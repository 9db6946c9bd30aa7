// The blocked conv's AVX-512 register tiles (conv_nchwc_avx512.cc f32, conv_nchwc_bf16_avx512.cc
// bf16): how a tile's T pixels x NB output blocks of f32 sums start and end, shared so that both
// precisions honour TileArgs::accumulate / last and apply the epilogue the same way. Include
// only from files compiled for AVX-512.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/conv_epilogue_avx512.h"
#include "kernels/cpu/conv_nchwc_cpu.h"

namespace sampan::cpu::nchwc_detail {

inline constexpr int kTileBlock = 16;  // the AVX-512 tiles' block: one zmm per pixel

// acc: [T][NB]: zero, or y's partial sums when a.accumulate (a later chunk of input channels).
template <int T, int NB>
inline void tile_start(const TileArgs& a, __m512 (&acc)[T][NB]) {
  const bool from_y = a.accumulate;
#pragma GCC unroll 14
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
    for (int j = 0; j < NB; ++j) {
      acc[t][j] = from_y ? _mm512_loadu_ps(a.y + j * a.y_ob + t * kTileBlock) : _mm512_setzero_ps();
    }
  }
}

// Writes acc [T][NB] to y: as they are unless a.last (a partial sum over a chunk of input
// channels), else with bias, residual and the activation (sigmoid is the driver's, after).
template <int T, int NB>
inline void tile_finish(const TileArgs& a, const __m512 (&acc)[T][NB]) {
  if (!a.last) {
#pragma GCC unroll 2
    for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 14
      for (int t = 0; t < T; ++t) _mm512_storeu_ps(a.y + j * a.y_ob + t * kTileBlock, acc[t][j]);
    }
    return;
  }
  const ConvEpilogue& ep = *a.ep;
#pragma GCC unroll 2
  for (int j = 0; j < NB; ++j) {
    const __m512 b = a.bias ? _mm512_loadu_ps(a.bias + j * kTileBlock) : _mm512_setzero_ps();
    float* y = a.y + j * a.y_ob;
    const float* r = a.res ? a.res + j * a.y_ob : nullptr;
#pragma GCC unroll 14
    for (int t = 0; t < T; ++t) {
      __m512 v = _mm512_add_ps(acc[t][j], b);
      if (r) v = _mm512_add_ps(v, _mm512_loadu_ps(r + t * kTileBlock));
      _mm512_storeu_ps(y + t * kTileBlock, conv_detail::activate_avx512(v, ep));
    }
  }
}

}  // namespace sampan::cpu::nchwc_detail
