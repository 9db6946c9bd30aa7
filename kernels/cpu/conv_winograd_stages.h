// The stages of the Winograd conv (conv_winograd_cpu.h) written once over a vector type V that
// holds one channel block (V::kLanes = block): conv_winograd_avx512.cc instantiates them with
// zmm (block 16), conv_winograd_avx2.cc with ymm (block 8). Include only from files compiled
// for V's instruction set. Every transform is lane-parallel: one vector = one pixel's block.
// Everything here has internal linkage (an unnamed namespace): each instruction set's file gets
// its own copies, so the linker never hands the AVX2 file a function compiled for AVX-512.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cpu/conv_winograd_detail.h"

namespace sampan::cpu::winograd_detail {
namespace {

// B^T of F(4x4, 3x3) applied to six vectors (one column or row of a 6x6 patch).
template <class V>
inline void bt6(const typename V::T d[6], typename V::T t[6]) {
  const auto four = V::set1(4.0f), m_five = V::set1(-5.0f);
  const auto two = V::set1(2.0f), m_four = V::set1(-4.0f);
  t[0] = V::fmadd(four, d[0], V::fmadd(m_five, d[2], d[4]));
  t[1] = V::fmadd(m_four, V::add(d[1], d[2]), V::add(d[3], d[4]));
  t[2] = V::fmadd(four, V::sub(d[1], d[2]), V::sub(d[4], d[3]));
  t[3] = V::fmadd(two, V::sub(d[3], d[1]), V::sub(d[4], d[2]));
  t[4] = V::fmadd(two, V::sub(d[1], d[3]), V::sub(d[4], d[2]));
  t[5] = V::fmadd(four, d[1], V::fmadd(m_five, d[3], d[5]));
}

// A^T applied to six vectors.
template <class V>
inline void at6(const typename V::T m[6], typename V::T y[4]) {
  const auto a = V::add(m[1], m[2]), b = V::sub(m[1], m[2]);
  const auto c = V::add(m[3], m[4]), d = V::sub(m[3], m[4]);
  y[0] = V::add(V::add(m[0], a), c);
  y[1] = V::fmadd(V::set1(2.0f), d, b);
  y[2] = V::fmadd(V::set1(4.0f), c, a);
  y[3] = V::add(V::fmadd(V::set1(8.0f), d, b), m[5]);
}

// p: the patch's top-left pixel, rows `row` floats apart, pixels kLanes apart;
// v: position 0 of this tile and block, positions `pos` floats apart.
template <class V>
inline void transform_patch(const float* p, int64_t row, float* v, int64_t pos) {
  constexpr int kB = V::kLanes;
  typename V::T t[6][6];
  for (int j = 0; j < 6; ++j) {
    typename V::T d[6], o[6];
    for (int i = 0; i < 6; ++i) d[i] = V::load(p + i * row + j * kB);
    bt6<V>(d, o);
    for (int i = 0; i < 6; ++i) t[i][j] = o[i];
  }
  for (int i = 0; i < 6; ++i) {
    typename V::T o[6];
    bt6<V>(t[i], o);
    for (int j = 0; j < 6; ++j) V::store(v + (i * 6 + j) * pos, o[j]);
  }
}

// T tiles x NB output blocks at one position, over n_cb input blocks of kLanes channels.
// v: [n_cb][nt][kLanes] (v_cb floats between blocks), this position's first tile;
// u: [n_cb][kLanes][kLanes] of the first output block, the second u_ob floats later;
// m: [NB][nt][kLanes] (m_ob floats between blocks).
template <class V, int T, int NB>
void gemm_tile(const float* v, int64_t v_cb, int64_t n_cb, const float* u, int64_t u_ob,
               float* m, int64_t m_ob) {
  constexpr int kB = V::kLanes;
  typename V::T acc[T][NB];
#pragma GCC unroll 14
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
    for (int j = 0; j < NB; ++j) acc[t][j] = V::zero();
  }
  for (int64_t cb = 0; cb < n_cb; ++cb) {
    const float* vc = v + cb * v_cb;
    const float* uc = u + cb * kB * kB;
#pragma GCC unroll 4
    for (int ic = 0; ic < kB; ++ic) {
      const auto w0 = V::load(uc + ic * kB);
      auto w1 = w0;
      if constexpr (NB == 2) w1 = V::load(uc + u_ob + ic * kB);
#pragma GCC unroll 14
      for (int t = 0; t < T; ++t) {
        const auto xv = V::set1(vc[t * kB + ic]);
        acc[t][0] = V::fmadd(xv, w0, acc[t][0]);
        if constexpr (NB == 2) acc[t][1] = V::fmadd(xv, w1, acc[t][1]);
      }
    }
  }
#pragma GCC unroll 2
  for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 14
    for (int t = 0; t < T; ++t) V::store(m + j * m_ob + t * kB, acc[t][j]);
  }
}

template <class V>
using GemmFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t);

// Indexed [tiles - 1][blocks - 1].
template <class V, int... T>
constexpr std::array<std::array<GemmFn<V>, 2>, sizeof...(T)> gemm_table(
    std::integer_sequence<int, T...>) {
  return {{{&gemm_tile<V, T + 1, 1>, &gemm_tile<V, T + 1, 2>}...}};
}

struct TilePos {
  int64_t img, oy, ox;  // image and the tile's top-left output pixel
};

inline TilePos tile_pos(const WinogradConvShape& s, int64_t t) {
  const int64_t tw = (s.out_w() + 3) / 4, th = (s.out_h() + 3) / 4;
  const int64_t r = t % (tw * th);
  return {t / (tw * th), r / tw * 4, r % tw * 4};
}

template <class V>
void input_transform(const WinogradConvShape& s, const float* x, int64_t t0, int nt, float* v) {
  constexpr int kB = V::kLanes;
  const int64_t pos = s.in_blocks * nt * kB;  // floats between positions in v
  alignas(64) float patch[6 * 6 * kB];
  for (int t = 0; t < nt; ++t) {
    const TilePos tp = tile_pos(s, t0 + t);
    const int64_t iy0 = tp.oy - s.pad_t, ix0 = tp.ox - s.pad_l;
    const bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + 6 <= s.h && ix0 + 6 <= s.w;
    for (int64_t cb = 0; cb < s.in_blocks; ++cb) {
      const float* plane = x + ((tp.img * s.in_blocks + cb) * s.h) * s.w * kB;
      float* vt = v + (cb * nt + t) * kB;
      if (inside) {
        transform_patch<V>(plane + (iy0 * s.w + ix0) * kB, s.w * kB, vt, pos);
        continue;
      }
      // A border tile: gather the patch with zeros outside the input.
      for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 6; ++j) {
          const int64_t iy = iy0 + i, ix = ix0 + j;
          const bool in = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
          V::store(patch + (i * 6 + j) * kB,
                   in ? V::load(plane + (iy * s.w + ix) * kB) : V::zero());
        }
      }
      transform_patch<V>(patch, 6 * kB, vt, pos);
    }
  }
}

template <class V>
void gemm_output(const WinogradConvShape& s, const float* v, int64_t t0, int nt, const float* u,
                 int64_t ob0, int64_t ob1, const float* bias, const float* residual,
                 const ConvEpilogue& ep, float* m, float* y) {
  constexpr int kB = V::kLanes;
  static constexpr auto kGemm =
      gemm_table<V>(std::make_integer_sequence<int, V::kTileRows>{});
  const int64_t ho = s.out_h(), wo = s.out_w();
  const int64_t v_pos = s.in_blocks * nt * kB;
  const int64_t u_pos = s.in_blocks * kB * kB;
  const int64_t u_ob = kWinogradPoints * u_pos;
  const int64_t m_ob = nt * kB;
  const int64_t m_pos = 2 * m_ob;
  const bool sigmoid = ep.act == ConvActivation::kSigmoid;
  for (int64_t ob = ob0; ob < ob1; ob += 2) {
    const int nb = static_cast<int>(std::min<int64_t>(2, ob1 - ob));
    for (int p = 0; p < kWinogradPoints; ++p) {
      // The group's tiles in register tiles of up to kTileRows; the weights they share stay
      // in L1 between them.
      for (int t = 0; t < nt; t += V::kTileRows) {
        const int rows = std::min(V::kTileRows, nt - t);
        kGemm[static_cast<size_t>(rows - 1)][static_cast<size_t>(nb - 1)](
            v + p * v_pos + t * kB, nt * kB, s.in_blocks, u + ob * u_ob + p * u_pos, u_ob,
            m + p * m_pos + t * kB, m_ob);
      }
    }
    for (int j = 0; j < nb; ++j) {
      const auto bv = bias ? V::load(bias + (ob + j) * kB) : V::zero();
      for (int t = 0; t < nt; ++t) {
        const float* mt = m + j * m_ob + t * kB;
        typename V::T r[6][4];
        for (int i = 0; i < 6; ++i) {
          typename V::T row[6];
          for (int k = 0; k < 6; ++k) row[k] = V::load(mt + (i * 6 + k) * m_pos);
          at6<V>(row, r[i]);
        }
        const TilePos tp = tile_pos(s, t0 + t);
        const int64_t off = (tp.img * s.out_blocks + ob + j) * ho * wo * kB;
        const int64_t ny = std::min<int64_t>(4, ho - tp.oy), nx = std::min<int64_t>(4, wo - tp.ox);
        for (int c = 0; c < nx; ++c) {
          typename V::T col[6], o[4];
          for (int i = 0; i < 6; ++i) col[i] = r[i][c];
          at6<V>(col, o);
          for (int i = 0; i < ny; ++i) {
            const int64_t at = off + ((tp.oy + i) * wo + tp.ox + c) * kB;
            auto val = V::add(o[i], bv);
            if (residual) val = V::add(val, V::load(residual + at));
            V::store(y + at, V::activate(val, ep));
            if (sigmoid) conv_activate(ep, y + at, kB);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace sampan::cpu::winograd_detail
