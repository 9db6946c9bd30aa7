// Layout conversions and pooling of blocked tensors (conv_nchwc_cpu.h). Pooling works on whole
// channel vectors: one window tap is one contiguous block of `block` floats, one or two ymm
// max / add per tap (Lanes below).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/conv_nchwc_cpu.h"

namespace sampan::cpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Pixels per transposed strip: a strip of `block` source rows stays in L1 while it is written.
constexpr int64_t kStrip = 64;

// Taps [lo, hi) of a window starting at `start` (k taps, dilation d) inside [0, size), and how
// many fall inside the padded range [-pad_lo, size + pad_hi) (pool_cpu.cc's rule).
struct TapRange {
  int64_t lo = 0, hi = 0, padded = 0;
};

TapRange taps(int64_t start, int64_t k, int64_t d, int64_t size, int64_t pad_lo,
              int64_t pad_hi) {
  TapRange r;
  r.lo = k;
  for (int64_t t = 0; t < k; ++t) {
    const int64_t i = start + t * d;
    if (i >= 0 && i < size) {
      r.lo = std::min(r.lo, t);
      r.hi = t + 1;
    }
    if (i >= -pad_lo && i < size + pad_hi) ++r.padded;
  }
  if (r.hi <= r.lo) r.lo = r.hi = 0;
  return r;
}

// B floats (one channel block) in B / 8 ymm registers. This file is built at the AVX2
// baseline; GCC left the plain lane loops as 16 scalar maxss per tap (std::max or a compare).
template <int B>
struct Lanes {
  static constexpr int kN = B / 8;
  __m256 v[kN];
  static Lanes fill(float f) {
    Lanes r;
    for (int i = 0; i < kN; ++i) r.v[i] = _mm256_set1_ps(f);
    return r;
  }
  // acc = x > acc ? x : acc per lane (vmaxps(x, acc) gives acc where either is NaN): the
  // result std::max(acc, x) gives, as the NCHW pool computes it.
  void max_with(const float* x) {
    for (int i = 0; i < kN; ++i) v[i] = _mm256_max_ps(_mm256_loadu_ps(x + 8 * i), v[i]);
  }
  void add(const float* x) {
    for (int i = 0; i < kN; ++i) v[i] = _mm256_add_ps(v[i], _mm256_loadu_ps(x + 8 * i));
  }
  void div(float d) {
    for (int i = 0; i < kN; ++i) v[i] = _mm256_div_ps(v[i], _mm256_set1_ps(d));
  }
  void store(float* y) const {
    for (int i = 0; i < kN; ++i) _mm256_storeu_ps(y + 8 * i, v[i]);
  }
};

// One output row of blocks; B is the block.
template <int B>
void pool_row(const PoolShape& s, const TapRange& ry, const std::vector<TapRange>& cols,
              int64_t oy, const float* xp, float* yr) {
  const bool is_max = s.kind == PoolKind::kMax;
  const int64_t iy0 = oy * s.stride_h - s.pad_t;
  for (int64_t ox = 0; ox < s.wo; ++ox) {
    const TapRange& rx = cols[static_cast<size_t>(ox)];
    const int64_t ix0 = ox * s.stride_w - s.pad_l;
    Lanes<B> acc = Lanes<B>::fill(is_max ? -std::numeric_limits<float>::infinity() : 0.0f);
    for (int64_t ky = ry.lo; ky < ry.hi; ++ky) {
      const float* xr = xp + ((iy0 + ky * s.dil_h) * s.w + ix0) * B;
      for (int64_t kx = rx.lo; kx < rx.hi; ++kx) {
        const float* v = xr + kx * s.dil_w * B;
        if (is_max) {
          acc.max_with(v);
        } else {
          acc.add(v);
        }
      }
    }
    if (!is_max) {
      const int64_t count = s.count_include_pad ? ry.padded * rx.padded
                                                : (ry.hi - ry.lo) * (rx.hi - rx.lo);
      // Division, not a multiply by the reciprocal, to round like the NCHW pool does.
      if (count > 0) {
        acc.div(static_cast<float>(count));
      } else {
        acc = Lanes<B>::fill(0.0f);
      }
    }
    acc.store(yr + ox * B);
  }
}

template <int B>
void global_pool(const PoolShape& s, const float* x, float* y, TaskRunner& runner) {
  const int64_t hw = s.h * s.w;
  runner.run(s.n * (s.c / B), [&](int64_t plane) {
    const float* xp = x + plane * hw * B;
    const bool is_max = s.kind == PoolKind::kMax;
    Lanes<B> acc = Lanes<B>::fill(is_max ? -std::numeric_limits<float>::infinity() : 0.0f);
    for (int64_t i = 0; i < hw; ++i) {
      if (is_max) {
        acc.max_with(xp + i * B);
      } else {
        acc.add(xp + i * B);
      }
    }
    if (!is_max) acc.div(static_cast<float>(hw));
    acc.store(y + plane * B);
  });
}

template <int B>
void pool(const PoolShape& s, const float* x, float* y, TaskRunner& runner) {
  if (s.ho == 1 && s.wo == 1 && s.kh == s.h && s.kw == s.w && s.pad_t == 0 && s.pad_l == 0 &&
      s.pad_b == 0 && s.pad_r == 0 && s.dil_h == 1 && s.dil_w == 1) {
    global_pool<B>(s, x, y, runner);
    return;
  }
  std::vector<TapRange> rows(static_cast<size_t>(s.ho));
  std::vector<TapRange> cols(static_cast<size_t>(s.wo));
  for (int64_t oy = 0; oy < s.ho; ++oy) {
    rows[static_cast<size_t>(oy)] =
        taps(oy * s.stride_h - s.pad_t, s.kh, s.dil_h, s.h, s.pad_t, s.pad_b);
  }
  for (int64_t ox = 0; ox < s.wo; ++ox) {
    cols[static_cast<size_t>(ox)] =
        taps(ox * s.stride_w - s.pad_l, s.kw, s.dil_w, s.w, s.pad_l, s.pad_r);
  }
  const int64_t planes = s.n * (s.c / B);
  runner.run(planes * s.ho, [&](int64_t task) {
    const int64_t plane = task / s.ho;
    const int64_t oy = task % s.ho;
    pool_row<B>(s, rows[static_cast<size_t>(oy)], cols, oy, x + plane * s.h * s.w * B,
                y + (plane * s.ho + oy) * s.wo * B);
  });
}

}  // namespace

void reorder_to_nchwc(int64_t n, int64_t c, int64_t hw, int64_t block, const float* x, float* y,
                      TaskRunner& runner) {
  const int64_t cb = ceil_div(c, block);
  const int64_t strips = ceil_div(hw, kStrip);
  runner.run(n * cb * strips, [&](int64_t task) {
    const int64_t strip = task % strips;
    const int64_t blk = (task / strips) % cb;
    const int64_t img = task / (strips * cb);
    const int64_t p0 = strip * kStrip;
    const int64_t p1 = std::min(hw, p0 + kStrip);
    float* yb = y + (img * cb + blk) * hw * block;
    for (int64_t l = 0; l < block; ++l) {
      const int64_t ch = blk * block + l;
      if (ch >= c) {
        for (int64_t p = p0; p < p1; ++p) yb[p * block + l] = 0.0f;
        continue;
      }
      const float* xr = x + (img * c + ch) * hw;
      for (int64_t p = p0; p < p1; ++p) yb[p * block + l] = xr[p];
    }
  });
}

void reorder_to_nchw(int64_t n, int64_t c, int64_t hw, int64_t block, const float* x, float* y,
                     TaskRunner& runner) {
  const int64_t cb = ceil_div(c, block);
  const int64_t strips = ceil_div(hw, kStrip);
  runner.run(n * cb * strips, [&](int64_t task) {
    const int64_t strip = task % strips;
    const int64_t blk = (task / strips) % cb;
    const int64_t img = task / (strips * cb);
    const int64_t p0 = strip * kStrip;
    const int64_t p1 = std::min(hw, p0 + kStrip);
    const float* xb = x + (img * cb + blk) * hw * block;
    const int64_t lanes = std::min(block, c - blk * block);
    for (int64_t l = 0; l < lanes; ++l) {
      float* yr = y + (img * c + blk * block + l) * hw;
      for (int64_t p = p0; p < p1; ++p) yr[p] = xb[p * block + l];
    }
  });
}

void pool2d_nchwc(const PoolShape& s, int64_t block, const float* x, float* y,
                  TaskRunner& runner) {
  if (s.n <= 0 || s.c <= 0 || s.ho <= 0 || s.wo <= 0) return;
  if (block == 16) {
    pool<16>(s, x, y, runner);
  } else {
    pool<8>(s, x, y, runner);
  }
}

}  // namespace sampan::cpu
