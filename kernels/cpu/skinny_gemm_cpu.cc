#include "kernels/cpu/skinny_gemm_cpu.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

// R rows of x against NW rows of w: R * NW dot products of length k, each in one 8-lane
// accumulator (R * NW <= 12 of the 16 ymm registers).
template <int R, int NW>
void dot_tile(int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
              const float* bias, float* y, int64_t ldy) {
  __m256 acc[R][NW];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < NW; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    __m256 xv[R];
    for (int i = 0; i < R; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + c);
    for (int j = 0; j < NW; ++j) {
      const __m256 wv = _mm256_loadu_ps(w + j * ldw + c);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (c < k) {
    const __m256i mask = Avx2::lane_mask(static_cast<int>(k - c));
    __m256 xv[R];
    for (int i = 0; i < R; ++i) xv[i] = _mm256_maskload_ps(x + i * ldx + c, mask);
    for (int j = 0; j < NW; ++j) {
      const __m256 wv = _mm256_maskload_ps(w + j * ldw + c, mask);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < NW; ++j) {
      y[i * ldy + j] = Avx2::reduce_add(acc[i][j]) + (bias ? bias[j] : 0.0f);
    }
  }
}

template <int R>
void dot_rows(int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
              const float* bias, float* y, int64_t ldy) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    dot_tile<R, 4>(k, x, ldx, w + j * ldw, ldw, bias ? bias + j : nullptr, y + j, ldy);
  }
  const float* bj = bias ? bias + j : nullptr;
  switch (n - j) {
    case 3: dot_tile<R, 3>(k, x, ldx, w + j * ldw, ldw, bj, y + j, ldy); break;
    case 2: dot_tile<R, 2>(k, x, ldx, w + j * ldw, ldw, bj, y + j, ldy); break;
    case 1: dot_tile<R, 1>(k, x, ldx, w + j * ldw, ldw, bj, y + j, ldy); break;
    default: break;
  }
}

// RG rows of out (rows r0.. of gᵀ) by CV vectors of columns: out[r, c] (+)= Σ_i g[i, r] x[i, c].
// cols < 8 * CV only on the last block (masked loads and stores).
template <int RG, int CV>
void outer_tile(int64_t m, int64_t cols, const float* g, int64_t ldg, const float* x,
                int64_t ldx, float* out, int64_t ldo, bool accumulate) {
  __m256 acc[RG][CV];
  for (int r = 0; r < RG; ++r) {
    for (int v = 0; v < CV; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  __m256i mask[CV];
  for (int v = 0; v < CV; ++v) mask[v] = Avx2::lane_mask(static_cast<int>(cols - 8 * v));
  const bool full = cols >= 8 * CV;
  for (int64_t i = 0; i < m; ++i) {
    __m256 xv[CV];
    for (int v = 0; v < CV; ++v) {
      xv[v] = full ? _mm256_loadu_ps(x + i * ldx + 8 * v)
                   : _mm256_maskload_ps(x + i * ldx + 8 * v, mask[v]);
    }
    for (int r = 0; r < RG; ++r) {
      const __m256 gv = _mm256_broadcast_ss(g + i * ldg + r);
      for (int v = 0; v < CV; ++v) acc[r][v] = _mm256_fmadd_ps(gv, xv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < RG; ++r) {
    for (int v = 0; v < CV; ++v) {
      float* o = out + r * ldo + 8 * v;
      if (full) {
        _mm256_storeu_ps(o, accumulate ? _mm256_add_ps(_mm256_loadu_ps(o), acc[r][v]) : acc[r][v]);
      } else {
        const __m256 prev = accumulate ? _mm256_maskload_ps(o, mask[v]) : _mm256_setzero_ps();
        _mm256_maskstore_ps(o, mask[v], _mm256_add_ps(prev, acc[r][v]));
      }
    }
  }
}

constexpr int kOuterCv = 3;                // 24 columns per tile: 4 x 3 accumulators
constexpr int64_t kOuterCols = 8 * kOuterCv;

void outer_block(int64_t m, int64_t n, int64_t cols, const float* g, int64_t ldg, const float* x,
                 int64_t ldx, float* out, int64_t ldo, bool accumulate) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) {
    outer_tile<4, kOuterCv>(m, cols, g + r, ldg, x, ldx, out + r * ldo, ldo, accumulate);
  }
  switch (n - r) {
    case 3: outer_tile<3, kOuterCv>(m, cols, g + r, ldg, x, ldx, out + r * ldo, ldo, accumulate); break;
    case 2: outer_tile<2, kOuterCv>(m, cols, g + r, ldg, x, ldx, out + r * ldo, ldo, accumulate); break;
    case 1: outer_tile<1, kOuterCv>(m, cols, g + r, ldg, x, ldx, out + r * ldo, ldo, accumulate); break;
    default: break;
  }
}

}  // namespace

void skinny_n_gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                   int64_t ldw, const float* bias, float* y, int64_t ldy, TaskRunner& runner) {
  if (m <= 0 || n <= 0) return;
  // Rows of x in pairs: 2 x 4 accumulators, and each w vector serves both rows from L1/L2.
  const int64_t pairs = (m + 1) / 2;
  util::parallel_for(runner, pairs, 8, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t i = 2 * p;
      if (i + 1 < m) {
        dot_rows<2>(n, k, x + i * ldx, ldx, w, ldw, bias, y + i * ldy, ldy);
      } else {
        dot_rows<1>(n, k, x + i * ldx, ldx, w, ldw, bias, y + i * ldy, ldy);
      }
    }
  });
}

void skinny_outer_sum(int64_t m, int64_t n, int64_t k, const float* g, int64_t ldg,
                      const float* x, int64_t ldx, float* out, int64_t ldo, bool accumulate,
                      TaskRunner& runner) {
  if (n <= 0 || k <= 0) return;
  if (m <= 0) {
    if (!accumulate) {
      for (int64_t r = 0; r < n; ++r) std::fill(out + r * ldo, out + r * ldo + k, 0.0f);
    }
    return;
  }
  // Column blocks: each reads its columns of x once per 4 rows of out (from L1 up to m ~ 400).
  const int64_t blocks = (k + kOuterCols - 1) / kOuterCols;
  util::parallel_for(runner, blocks, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kOuterCols;
      outer_block(m, n, std::min(kOuterCols, k - c0), g, ldg, x + c0, ldx, out + c0, ldo,
                  accumulate);
    }
  });
}

}  // namespace sampan::cpu
