// Pooling (pool_cpu.h): one input plane per task. The taps of a window that fall inside the
// input are a rectangle of rows and columns found once per output row/column, so the inner
// loops carry no bounds checks.
#include "kernels/cpu/pool_cpu.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace sampan::cpu {
namespace {

// Taps [lo, hi) of a window starting at `start` (dilation d, k taps) that land inside
// [0, size), and how many land inside the padded range [-pad_lo, size + pad_hi).
struct TapRange {
  int64_t lo = 0, hi = 0, padded = 0;
};

TapRange taps(int64_t start, int64_t k, int64_t d, int64_t size, int64_t pad_lo, int64_t pad_hi) {
  TapRange r;
  r.lo = k;
  r.hi = 0;
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

void global_pool(const PoolShape& s, const float* x, float* y, TaskRunner& runner) {
  const int64_t hw = s.h * s.w;
  runner.run(s.n * s.c, [&](int64_t plane) {
    const float* xp = x + plane * hw;
    if (s.kind == PoolKind::kAvg) {
      // Eight partial sums so the loop vectorises without reassociating a single sum.
      float part[8] = {};
      int64_t i = 0;
      for (; i + 8 <= hw; i += 8) {
        for (int j = 0; j < 8; ++j) part[j] += xp[i + j];
      }
      float sum = 0.0f;
      for (; i < hw; ++i) sum += xp[i];
      for (float p : part) sum += p;
      y[plane] = sum / static_cast<float>(hw);
    } else {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < hw; ++i) m = std::max(m, xp[i]);
      y[plane] = m;
    }
  });
}

}  // namespace

void pool2d(const PoolShape& s, const float* x, float* y, TaskRunner& runner) {
  if (s.n <= 0 || s.c <= 0 || s.ho <= 0 || s.wo <= 0) return;
  if (s.ho == 1 && s.wo == 1 && s.kh == s.h && s.kw == s.w && s.pad_t == 0 && s.pad_l == 0 &&
      s.pad_b == 0 && s.pad_r == 0 && s.dil_h == 1 && s.dil_w == 1) {
    global_pool(s, x, y, runner);
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
  const bool is_max = s.kind == PoolKind::kMax;
  runner.run(s.n * s.c, [&](int64_t plane) {
    const float* xp = x + plane * s.h * s.w;
    float* yp = y + plane * s.ho * s.wo;
    for (int64_t oy = 0; oy < s.ho; ++oy) {
      const TapRange& ry = rows[static_cast<size_t>(oy)];
      const int64_t iy0 = oy * s.stride_h - s.pad_t;
      for (int64_t ox = 0; ox < s.wo; ++ox) {
        const TapRange& rx = cols[static_cast<size_t>(ox)];
        const int64_t ix0 = ox * s.stride_w - s.pad_l;
        float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
        for (int64_t ky = ry.lo; ky < ry.hi; ++ky) {
          const float* xr = xp + (iy0 + ky * s.dil_h) * s.w + ix0;
          if (is_max) {
            for (int64_t kx = rx.lo; kx < rx.hi; ++kx) acc = std::max(acc, xr[kx * s.dil_w]);
          } else {
            for (int64_t kx = rx.lo; kx < rx.hi; ++kx) acc += xr[kx * s.dil_w];
          }
        }
        if (!is_max) {
          const int64_t count = s.count_include_pad ? ry.padded * rx.padded
                                                    : (ry.hi - ry.lo) * (rx.hi - rx.lo);
          acc = count > 0 ? acc / static_cast<float>(count) : 0.0f;
        }
        yp[oy * s.wo + ox] = acc;
      }
    }
  });
}

}  // namespace sampan::cpu
