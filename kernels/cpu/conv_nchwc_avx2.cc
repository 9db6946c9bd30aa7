// The AVX2 register tile of the blocked conv (conv_nchwc_cpu.h): up to 6 pixels x 2 ymm output
// vectors = 12 accumulators, 2 weight vectors and a broadcast register of the 16. With block 8
// the two vectors are two output blocks; with block 16 (a graph blocked for AVX-512 running on
// a CPU without it) they are the two halves of one block.
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/cpu/conv_nchwc_cpu.h"

namespace sampan::cpu::nchwc_detail {
namespace {

constexpr int kMaxPixels = 6;

inline __m256 activate(__m256 v, const ConvEpilogue& ep) {
  switch (ep.act) {
    case ConvActivation::kNone:
    case ConvActivation::kSigmoid:  // after the store, by the driver
      return v;
    case ConvActivation::kRelu: return _mm256_max_ps(v, _mm256_setzero_ps());
    case ConvActivation::kClip:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.act_min)),
                           _mm256_set1_ps(ep.act_max));
    case ConvActivation::kHardSwish: {
      const __m256 g = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
      const __m256 c = _mm256_min_ps(_mm256_max_ps(g, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
      return _mm256_mul_ps(v, c);
    }
  }
  return v;
}

// T pixels x NV output vectors of 8 channels. BLOCK: the tensor's block (8 or 16).
template <int T, int NV, int BLOCK>
void tile(const TileArgs& a, int64_t w_off1, int64_t y_off1) {
  __m256 acc[T][NV];
  const bool from_y = a.accumulate;
#pragma GCC unroll 6
  for (int t = 0; t < T; ++t) {
    acc[t][0] = from_y ? _mm256_loadu_ps(a.y + t * BLOCK) : _mm256_setzero_ps();
    if constexpr (NV == 2) {
      acc[t][1] = from_y ? _mm256_loadu_ps(a.y + y_off1 + t * BLOCK)
                         : _mm256_setzero_ps();
    }
  }
  const int64_t xp = a.x_pix;
  const int64_t b_in = a.b_in;
  for (int64_t cb = 0; cb < a.n_cb; ++cb) {
    for (int64_t ky = 0; ky < a.n_ky; ++ky) {
      const float* xr = a.x + cb * a.x_cb + ky * a.x_ky;
      const float* wr = a.w + cb * a.w_cb + ky * a.w_ky;
      for (int64_t kx = 0; kx < a.n_kx; ++kx) {
        const float* xk = xr + kx * a.x_kx;
        const float* wk = wr + kx * b_in * BLOCK;
#pragma GCC unroll 4
        for (int64_t ic = 0; ic < b_in; ++ic) {
          const __m256 w0 = _mm256_loadu_ps(wk + ic * BLOCK);
          __m256 w1 = w0;
          if constexpr (NV == 2) w1 = _mm256_loadu_ps(wk + w_off1 + ic * BLOCK);
#pragma GCC unroll 6
          for (int t = 0; t < T; ++t) {
            const __m256 xv = _mm256_broadcast_ss(xk + t * xp + ic);
            acc[t][0] = _mm256_fmadd_ps(xv, w0, acc[t][0]);
            if constexpr (NV == 2) acc[t][1] = _mm256_fmadd_ps(xv, w1, acc[t][1]);
          }
        }
      }
    }
  }
  if (!a.last) {  // a partial sum over a chunk of input channels: stored as it is
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) {
      float* y = a.y + (j == 0 ? 0 : y_off1);
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * BLOCK, acc[t][j]);
    }
    return;
  }
  const ConvEpilogue& ep = *a.ep;
#pragma GCC unroll 2
  for (int j = 0; j < NV; ++j) {
    const __m256 b = a.bias ? _mm256_loadu_ps(a.bias + j * 8) : _mm256_setzero_ps();
    const int64_t off = j == 0 ? 0 : y_off1;
    float* y = a.y + off;
    const float* r = a.res ? a.res + off : nullptr;
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      __m256 v = _mm256_add_ps(acc[t][j], b);
      if (r) v = _mm256_add_ps(v, _mm256_loadu_ps(r + t * BLOCK));
      _mm256_storeu_ps(y + t * BLOCK, activate(v, ep));
    }
  }
}

using Fn = void (*)(const TileArgs&, int64_t, int64_t);

template <int BLOCK, int... T>
constexpr std::array<std::array<Fn, 2>, sizeof...(T)> block_table(
    std::integer_sequence<int, T...>) {
  return {{{&tile<T + 1, 1, BLOCK>, &tile<T + 1, 2, BLOCK>}...}};
}

template <int BLOCK>
constexpr auto kTable = block_table<BLOCK>(std::make_integer_sequence<int, kMaxPixels>{});

// Block 8: nb blocks, one vector each; the second block's weights and outputs are w_ob / y_ob
// away.
void run_tile8(const TileArgs& a, int pixels, int nb) {
  kTable<8>[static_cast<size_t>(pixels - 1)][static_cast<size_t>(nb - 1)](a, a.w_ob, a.y_ob);
}

// Block 16: one block of two vectors, the second half 8 floats on.
void run_tile16(const TileArgs& a, int pixels, int /*nb = 1*/) {
  kTable<16>[static_cast<size_t>(pixels - 1)][1](a, 8, 8);
}

}  // namespace

TileKernel tile_kernel_avx2(int64_t block) {
  if (block == 16) return {16, kMaxPixels, 1, run_tile16, true};
  return {8, kMaxPixels, 2, run_tile8, true};
}

}  // namespace sampan::cpu::nchwc_detail
