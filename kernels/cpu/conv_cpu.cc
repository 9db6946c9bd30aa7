// The conv2d driver (conv_cpu.h): the direct per-plane kernel for convs whose groups have one
// input channel, and the tiled im2col GEMM for the rest.
#include "kernels/cpu/conv_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/isa.h"

namespace sampan::cpu {
namespace {

using conv_detail::MicroKernel;

// k rows of the packed input tile: with kNcMax columns the tile is 256 * 192 * 4 = 192 KB, which
// stays in L2 while every row block of the weights runs over it; a row block of the weights
// (8 x 256 floats, 8 KB) stays in L1 across the tile's column panels.
constexpr int64_t kKc = 256;
constexpr int64_t kNcMax = 192;  // a multiple of every micro-kernel's nr

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct AlignedFloats {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data;
  int64_t size = 0;
  float* get(int64_t n) {
    if (n > size) {
      const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
      data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      size = n;
    }
    return data.get();
  }
};

std::atomic<ConvKernelChoice> g_choice{ConvKernelChoice::kAuto};

// The AVX-512 tile needs only AVX-512 F (plus the OS's zmm state, which cpu_features checks):
// a CPU below the project's kAvx512 level for lack of FP16 (AMD Zen 4) still runs it, unless
// the environment lowered the level on purpose (SAMPAN_CPU_ISA=avx2).
bool avx512_tile_ok() {
  const CpuFeatures& f = cpu_features();
  if (!f.avx512f || !f.avx512vl || !f.avx512bw || !f.avx512dq) return false;
  if (active_isa() != Isa::kAvx2) return true;
  if (isa_supported(Isa::kAvx512)) return false;  // the level exists and was lowered
  const char* env = std::getenv("SAMPAN_CPU_ISA");
  return !(env && std::strcmp(env, "avx2") == 0);
}

MicroKernel pick_micro_kernel() {
  switch (g_choice.load(std::memory_order_relaxed)) {
    case ConvKernelChoice::kAvx2: return conv_detail::micro_kernel_avx2();
    case ConvKernelChoice::kAvx512:
      if (cpu_features().avx512f) return conv_detail::micro_kernel_avx512();
      return conv_detail::micro_kernel_avx2();
    case ConvKernelChoice::kAuto: break;
  }
  return avx512_tile_ok() ? conv_detail::micro_kernel_avx512()
                          : conv_detail::micro_kernel_avx2();
}

// The output pixels one panel covers, split where an output row ends: a run is `len` pixels of
// output row oy from column ox, landing at `dst` within the panel's row of nr.
struct Run {
  int64_t dst = 0;
  int64_t len = 0;
  int64_t oy = 0;
  int64_t ox = 0;
};

struct Geometry {
  ConvShape s;
  int64_t ho = 0, wo = 0, p = 0;  // output plane
  int64_t cg = 0, og = 0, k = 0;  // per group: input channels, output channels, c*kh*kw
  bool pointwise = false;         // 1x1, stride 1, no pads: B's rows are the image's planes
};

// Packs rows [k0, k0 + kc) and columns [j0, j0 + nc) of the im2col matrix of one image and
// group into panels of nr columns ([kc][nr] each, zero-filled past the last column).
// xg: [cg, h, w] the group's input channels; dst: [ceil(nc / nr), kc, nr].
void pack_tile(const Geometry& g, const float* xg, int64_t k0, int64_t kc, int64_t j0,
               int64_t nc, int nr, float* dst, std::vector<Run>& runs) {
  const ConvShape& s = g.s;
  const int64_t hw = s.h * s.w;
  const int64_t khw = s.kh * s.kw;
  const int64_t n_panels = ceil_div(nc, nr);
  for (int64_t pi = 0; pi < n_panels; ++pi) {
    const int64_t col0 = j0 + pi * nr;
    const int64_t ncols = std::min<int64_t>(nr, j0 + nc - col0);
    float* panel = dst + pi * kc * nr;
    if (g.pointwise) {
      for (int64_t r = 0; r < kc; ++r) {
        float* d = panel + r * nr;
        std::memcpy(d, xg + (k0 + r) * hw + col0, static_cast<size_t>(ncols) * sizeof(float));
        if (ncols < nr) std::memset(d + ncols, 0, static_cast<size_t>(nr - ncols) * sizeof(float));
      }
      continue;
    }
    runs.clear();
    for (int64_t col = col0; col < col0 + ncols;) {
      const int64_t oy = col / g.wo;
      const int64_t ox = col % g.wo;
      const int64_t len = std::min(g.wo - ox, col0 + ncols - col);
      runs.push_back({col - col0, len, oy, ox});
      col += len;
    }
    for (int64_t r = 0; r < kc; ++r) {
      const int64_t kk = k0 + r;
      const int64_t c = kk / khw;
      const int64_t ky = (kk % khw) / s.kw;
      const int64_t kx = kk % s.kw;
      float* d = panel + r * nr;
      for (const Run& run : runs) {
        float* out = d + run.dst;
        const int64_t iy = run.oy * s.stride_h - s.pad_t + ky * s.dil_h;
        if (iy < 0 || iy >= s.h) {
          std::memset(out, 0, static_cast<size_t>(run.len) * sizeof(float));
          continue;
        }
        const float* src = xg + c * hw + iy * s.w;
        const int64_t sw = s.stride_w;
        const int64_t ix0 = run.ox * sw - s.pad_l + kx * s.dil_w;  // input column of out[0]
        const int64_t lo = ix0 >= 0 ? 0 : std::min(run.len, ceil_div(-ix0, sw));
        const int64_t hi = ix0 > s.w - 1 ? 0 : std::min(run.len, (s.w - 1 - ix0) / sw + 1);
        for (int64_t t = 0; t < lo; ++t) out[t] = 0.0f;
        if (sw == 1) {
          if (hi > lo) {
            std::memcpy(out + lo, src + ix0 + lo, static_cast<size_t>(hi - lo) * sizeof(float));
          }
        } else {
          for (int64_t t = lo; t < hi; ++t) out[t] = src[ix0 + t * sw];
        }
        for (int64_t t = std::max(lo, hi); t < run.len; ++t) out[t] = 0.0f;
      }
      if (ncols < nr) std::memset(d + ncols, 0, static_cast<size_t>(nr - ncols) * sizeof(float));
    }
  }
}

struct PackScratch {
  AlignedFloats tile;
  std::vector<Run> runs;
};

void conv_gemm(const Geometry& g, const float* x, const float* w, const float* bias,
               const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner) {
  const ConvShape& s = g.s;
  const MicroKernel mk = pick_micro_kernel();
  const int nr = mk.nr;
  const int mr = mk.mr;
  const int64_t n_panels = ceil_div(g.p, nr);
  const int64_t panels_per_tile_max = kNcMax / nr;
  const int64_t n_ptiles = ceil_div(n_panels, panels_per_tile_max);
  // Even column tiles, so the last one is not a sliver.
  const int64_t panels_per_tile = ceil_div(n_panels, n_ptiles);
  const int64_t nc_tile = panels_per_tile * nr;
  const int64_t base = s.n * s.group * n_ptiles;
  // Too few column tiles for the workers (small planes, late layers): split the output
  // channels too; each chunk repacks its tile, which costs little when the plane is small.
  const int64_t row_blocks = ceil_div(g.og, mr);
  const int64_t want = 2 * static_cast<int64_t>(runner.concurrency());
  const int64_t n_ochunks = base >= want ? 1 : std::min(row_blocks, ceil_div(want, base));
  const int64_t rows_per_chunk = ceil_div(row_blocks, n_ochunks) * mr;
  const int64_t n_oc = ceil_div(g.og, rows_per_chunk);
  const int64_t n_tasks = base * n_oc;
  const bool sigmoid = ep.act == ConvActivation::kSigmoid;

  runner.run(n_tasks, [&](int64_t task) {
    thread_local PackScratch scratch;
    const int64_t oc = task % n_oc;
    const int64_t pt = (task / n_oc) % n_ptiles;
    const int64_t gi = (task / (n_oc * n_ptiles)) % s.group;
    const int64_t img = task / (n_oc * n_ptiles * s.group);
    const int64_t j0 = pt * nc_tile;
    const int64_t nc = std::min(nc_tile, g.p - j0);
    const int64_t o0 = oc * rows_per_chunk;
    const int64_t o1 = std::min(g.og, o0 + rows_per_chunk);
    if (nc <= 0 || o0 >= o1) return;
    const float* xg = x + (img * s.c + gi * g.cg) * s.h * s.w;
    const float* ag = w + gi * g.og * g.k;
    const int64_t y_off = (img * s.o + gi * g.og) * g.p;
    float* yg = y + y_off;
    const float* rg = residual ? residual + y_off : nullptr;
    const float* bg = bias ? bias + gi * g.og : nullptr;
    const int64_t kc_max = std::min(kKc, g.k);
    float* bp = scratch.tile.get(kc_max * ceil_div(nc, nr) * nr);
    alignas(64) float tmp_c[8 * 32];
    alignas(64) float tmp_r[8 * 32];
    for (int64_t k0 = 0; k0 < g.k; k0 += kKc) {
      const int64_t kc = std::min(kKc, g.k - k0);
      pack_tile(g, xg, k0, kc, j0, nc, nr, bp, scratch.runs);
      const bool accumulate = k0 > 0;
      const bool last = k0 + kc == g.k;
      for (int64_t i = o0; i < o1; i += mr) {
        const int m = static_cast<int>(std::min<int64_t>(mr, o1 - i));
        const float* a = ag + i * g.k + k0;
        const float* bi = bg ? bg + i : nullptr;
        for (int64_t pi = 0; pi * nr < nc; ++pi) {
          const int64_t col = j0 + pi * nr;
          const int64_t ncols = std::min<int64_t>(nr, j0 + nc - col);
          float* c = yg + i * g.p + col;
          const float* r = rg ? rg + i * g.p + col : nullptr;
          const float* panel = bp + pi * kc * nr;
          if (ncols == nr) {
            mk.fn(m, kc, a, g.k, panel, c, g.p, accumulate, last, bi, r, &ep);
            continue;
          }
          // A partial panel (the plane's last pixels) goes through a full-width copy, since
          // the micro-kernel always writes nr columns.
          const size_t row_bytes = static_cast<size_t>(ncols) * sizeof(float);
          for (int row = 0; row < m; ++row) {
            if (accumulate) std::memcpy(tmp_c + row * nr, c + row * g.p, row_bytes);
            if (last && r) std::memcpy(tmp_r + row * nr, r + row * g.p, row_bytes);
          }
          mk.fn(m, kc, a, g.k, panel, tmp_c, nr, accumulate, last, bi,
                last && r ? tmp_r : nullptr, &ep);
          for (int row = 0; row < m; ++row) {
            std::memcpy(c + row * g.p, tmp_c + row * nr, row_bytes);
          }
        }
      }
    }
    if (sigmoid) {
      for (int64_t i = o0; i < o1; ++i) conv_activate(ep, yg + i * g.p + j0, nc);
    }
  });
}

// Convs whose groups read one input channel each (depthwise and its channel multipliers): one
// output plane per task, accumulated row by row so the inner loop runs along the output width
// (contiguous for stride 1, which the compiler vectorises).
void conv_direct(const Geometry& g, const float* x, const float* w, const float* bias,
                 const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner) {
  const ConvShape& s = g.s;
  runner.run(s.n * s.o, [&](int64_t plane) {
    const int64_t o = plane % s.o;
    const int64_t img = plane / s.o;
    const float* xp = x + (img * s.c + o / g.og) * s.h * s.w;
    const float* wk = w + o * s.kh * s.kw;
    float* yp = y + plane * g.p;
    const float b = bias ? bias[o] : 0.0f;
    const int64_t sw = s.stride_w;
    for (int64_t oy = 0; oy < g.ho; ++oy) {
      float* yr = yp + oy * g.wo;
      for (int64_t ox = 0; ox < g.wo; ++ox) yr[ox] = b;
      for (int64_t ky = 0; ky < s.kh; ++ky) {
        const int64_t iy = oy * s.stride_h - s.pad_t + ky * s.dil_h;
        if (iy < 0 || iy >= s.h) continue;
        const float* xr = xp + iy * s.w;
        for (int64_t kx = 0; kx < s.kw; ++kx) {
          const float wv = wk[ky * s.kw + kx];
          const int64_t ix0 = -s.pad_l + kx * s.dil_w;
          const int64_t lo = ix0 >= 0 ? 0 : std::min(g.wo, ceil_div(-ix0, sw));
          const int64_t hi = ix0 > s.w - 1 ? 0 : std::min(g.wo, (s.w - 1 - ix0) / sw + 1);
          if (sw == 1) {
            const float* xs = xr + ix0;
            for (int64_t ox = lo; ox < hi; ++ox) yr[ox] += wv * xs[ox];
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) yr[ox] += wv * xr[ix0 + ox * sw];
          }
        }
      }
      if (residual) {
        const float* rr = residual + plane * g.p + oy * g.wo;
        for (int64_t ox = 0; ox < g.wo; ++ox) yr[ox] += rr[ox];
      }
      conv_activate(ep, yr, g.wo);
    }
  });
}

}  // namespace

void set_conv_kernel(ConvKernelChoice choice) { g_choice.store(choice); }

bool conv_kernel_available(ConvKernelChoice choice) {
  return choice != ConvKernelChoice::kAvx512 || cpu_features().avx512f;
}

void conv_activate(const ConvEpilogue& ep, float* v, int64_t n) {
  switch (ep.act) {
    case ConvActivation::kNone: return;
    case ConvActivation::kRelu:
      for (int64_t i = 0; i < n; ++i) v[i] = std::max(v[i], 0.0f);
      return;
    case ConvActivation::kClip:
      for (int64_t i = 0; i < n; ++i) v[i] = std::min(std::max(v[i], ep.act_min), ep.act_max);
      return;
    case ConvActivation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) v[i] = 1.0f / (1.0f + std::exp(-v[i]));
      return;
    case ConvActivation::kHardSwish:
      for (int64_t i = 0; i < n; ++i) {
        v[i] *= std::min(std::max(v[i] * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
      }
      return;
  }
}

void conv2d(const ConvShape& s, const float* x, const float* w, const float* bias,
            const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner) {
  Geometry g;
  g.s = s;
  g.ho = s.out_h();
  g.wo = s.out_w();
  g.p = g.ho * g.wo;
  g.cg = s.c / s.group;
  g.og = s.o / s.group;
  g.k = g.cg * s.kh * s.kw;
  g.pointwise = s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_t == 0 &&
                s.pad_l == 0 && s.pad_b == 0 && s.pad_r == 0;
  if (s.n <= 0 || s.o <= 0 || g.p <= 0) return;
  if (g.cg == 1 && s.group > 1) {
    conv_direct(g, x, w, bias, residual, ep, y, runner);
    return;
  }
  conv_gemm(g, x, w, bias, residual, ep, y, runner);
}

}  // namespace sampan::cpu
