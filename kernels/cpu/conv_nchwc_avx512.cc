// The AVX-512 register tile of the blocked conv (conv_nchwc_cpu.h): block 16, up to 14 pixels
// x 2 output blocks = 28 zmm accumulators, 2 weight vectors and a broadcast register of the 32.
// Every input value loaded is used for 2 FMAs and every weight vector for up to 14, so the
// FMA ports, not the loads, set the pace. Honours TileArgs::accumulate / last, so pointwise
// convs run over chunks of input channels (conv2d_nchwc).
// GCC 12's _mm512_undefined_ps (inside max/min) trips -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/cpu/conv_nchwc_tile_avx512.h"

namespace sampan::cpu::nchwc_detail {
namespace {

constexpr int kBlock = kTileBlock;
constexpr int kMaxPixels = 14;

// T pixels x NB blocks. BIN: channels per input block when known at compile time (16), else 0;
// XP: floats between pixels' taps when known (16: stride 1, 32: stride 2), else 0.
template <int T, int NB, int BIN, int XP>
void tile(const TileArgs& a) {
  __m512 acc[T][NB];
  tile_start(a, acc);
  const int64_t xp = XP ? XP : a.x_pix;
  const int64_t b_in = BIN ? BIN : a.b_in;
  const int64_t w_ob = a.w_ob;
  for (int64_t cb = 0; cb < a.n_cb; ++cb) {
    for (int64_t ky = 0; ky < a.n_ky; ++ky) {
      const float* xr = a.x + cb * a.x_cb + ky * a.x_ky;
      const float* wr = a.w + cb * a.w_cb + ky * a.w_ky;
      for (int64_t kx = 0; kx < a.n_kx; ++kx) {
        const float* xk = xr + kx * a.x_kx;
        const float* wk = wr + kx * b_in * kBlock;
#pragma GCC unroll 4
        for (int64_t ic = 0; ic < b_in; ++ic) {
          const __m512 w0 = _mm512_loadu_ps(wk + ic * kBlock);
          __m512 w1 = w0;
          if constexpr (NB == 2) w1 = _mm512_loadu_ps(wk + w_ob + ic * kBlock);
#pragma GCC unroll 14
          for (int t = 0; t < T; ++t) {
            const __m512 xv = _mm512_set1_ps(xk[t * xp + ic]);
            acc[t][0] = _mm512_fmadd_ps(xv, w0, acc[t][0]);
            if constexpr (NB == 2) acc[t][1] = _mm512_fmadd_ps(xv, w1, acc[t][1]);
          }
        }
      }
    }
  }
  tile_finish(a, acc);
}

using Fn = void (*)(const TileArgs&);

// The tiles of one (BIN, XP) variant, indexed [pixels - 1][nb - 1].
template <int BIN, int XP, int... T>
constexpr std::array<std::array<Fn, 2>, sizeof...(T)> variant_table(
    std::integer_sequence<int, T...>) {
  return {{{&tile<T + 1, 1, BIN, XP>, &tile<T + 1, 2, BIN, XP>}...}};
}

template <int BIN, int XP>
constexpr auto kTable = variant_table<BIN, XP>(std::make_integer_sequence<int, kMaxPixels>{});

void run_tile(const TileArgs& a, int pixels, int nb) {
  const size_t t = static_cast<size_t>(pixels - 1);
  const size_t j = static_cast<size_t>(nb - 1);
  if (a.b_in == kBlock) {
    if (a.x_pix == kBlock) return kTable<kBlock, kBlock>[t][j](a);
    if (a.x_pix == 2 * kBlock) return kTable<kBlock, 2 * kBlock>[t][j](a);
    return kTable<kBlock, 0>[t][j](a);
  }
  return kTable<0, 0>[t][j](a);
}

}  // namespace

TileKernel tile_kernel_avx512() { return {kBlock, kMaxPixels, 2, run_tile, true}; }

}  // namespace sampan::cpu::nchwc_detail
