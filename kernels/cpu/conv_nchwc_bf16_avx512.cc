// The bf16 register tile of the blocked conv (conv_nchwc_cpu.h, conv2d_nchwc_bf16): block 16,
// up to 14 pixels x 2 output blocks = 28 zmm f32 accumulators, as the f32 tile
// (conv_nchwc_avx512.cc), but each step takes a pair of input channels: one 32-bit broadcast of
// the pixel's two bf16 inputs meets one zmm of 16 outputs x 2 channels of bf16 weights in one
// vdpbf16ps, the work of two FMAs. vdpbf16ps has a latency of 6 cycles at 2 per cycle on Zen 5, so
// the 28 independent sums keep both pipes busy; each weight vector serves up to 14 pixels and
// each broadcast 2 blocks, so loads stay below one per instruction. Honours TileArgs::accumulate
// / last as the f32 tile does. Plain input (the stem on few channels) pairs kernel columns
// instead of channels: the two taps' inputs are neighbours in the row.
// GCC 12's _mm512_undefined_ps (inside max/min) trips -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/conv_nchwc_tile_avx512.h"

namespace sampan::cpu::nchwc_detail {
namespace {

constexpr int kBlock = kTileBlock;
constexpr int kPairs = kBlock / 2;
constexpr int kMaxPixels = 14;

// The bf16 pair at x (input channels 2p, 2p + 1 of one pixel) as the lane vdpbf16ps broadcasts.
inline __m512bh pair_at(const uint16_t* x) {
  int32_t v;
  std::memcpy(&v, x, sizeof(v));
  return (__m512bh)_mm512_set1_epi32(v);
}

// T pixels x NB blocks; XP: elements between pixels' taps when known (16: stride 1, 32: stride
// 2, 2: the stem's stride 2), else 0. PAIRS per tap: 8, the input channels of a block in pairs;
// or 1 for plain input (the stem), whose tap is a pair of kernel columns (TileArgs::x_kx = 2
// elements between taps, the two inputs adjacent in the row).
template <int T, int NB, int XP, int PAIRS>
void tile(const TileArgs& a) {
  __m512 acc[T][NB];
  tile_start(a, acc);
  const int64_t xp = XP ? XP : a.x_pix;
  const int64_t w_ob = a.w_ob;
  for (int64_t cb = 0; cb < a.n_cb; ++cb) {
    for (int64_t ky = 0; ky < a.n_ky; ++ky) {
      const uint16_t* xr = a.x16 + cb * a.x_cb + ky * a.x_ky;
      const uint16_t* wr = a.w16 + cb * a.w_cb + ky * a.w_ky;
      for (int64_t kx = 0; kx < a.n_kx; ++kx) {
        const uint16_t* xk = xr + kx * a.x_kx;
        const uint16_t* wk = wr + kx * PAIRS * 2 * kBlock;
#pragma GCC unroll 2
        for (int p = 0; p < PAIRS; ++p) {
          const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wk + p * 2 * kBlock);
          __m512bh w1 = w0;
          if constexpr (NB == 2) w1 = (__m512bh)_mm512_loadu_si512(wk + w_ob + p * 2 * kBlock);
#pragma GCC unroll 14
          for (int t = 0; t < T; ++t) {
            const __m512bh xv = pair_at(xk + t * xp + 2 * p);
            acc[t][0] = _mm512_dpbf16_ps(acc[t][0], xv, w0);
            if constexpr (NB == 2) acc[t][1] = _mm512_dpbf16_ps(acc[t][1], xv, w1);
          }
        }
      }
    }
  }
  tile_finish(a, acc);
}

using Fn = void (*)(const TileArgs&);

// The tiles of one (XP, PAIRS) variant, indexed [pixels - 1][nb - 1].
template <int XP, int PAIRS, int... T>
constexpr std::array<std::array<Fn, 2>, sizeof...(T)> variant_table(
    std::integer_sequence<int, T...>) {
  return {{{&tile<T + 1, 1, XP, PAIRS>, &tile<T + 1, 2, XP, PAIRS>}...}};
}

template <int XP, int PAIRS>
constexpr auto kTable = variant_table<XP, PAIRS>(std::make_integer_sequence<int, kMaxPixels>{});

void run_tile(const TileArgs& a, int pixels, int nb) {
  const size_t t = static_cast<size_t>(pixels - 1);
  const size_t j = static_cast<size_t>(nb - 1);
  if (a.b_in == 1) {  // the stem: kernel-column pairs
    if (a.x_pix == 2) return kTable<2, 1>[t][j](a);
    return kTable<0, 1>[t][j](a);
  }
  if (a.x_pix == kBlock) return kTable<kBlock, kPairs>[t][j](a);
  if (a.x_pix == 2 * kBlock) return kTable<2 * kBlock, kPairs>[t][j](a);
  return kTable<0, kPairs>[t][j](a);
}

}  // namespace

TileKernel tile_kernel_bf16_avx512() { return {kBlock, kMaxPixels, 2, run_tile, true}; }

}  // namespace sampan::cpu::nchwc_detail
