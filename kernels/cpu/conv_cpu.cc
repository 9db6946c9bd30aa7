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

#include "kernels/common/half.h"
#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/prefetch.h"

namespace sampan::cpu {
namespace {

using conv_detail::MicroKernel;

// k rows of the packed input tile: with kNcMax columns the tile is 256 * 192 * 4 = 192 KB, which
// stays in L2 while every row block of the weights runs over it; a row block of the weights
// (8 x 256 floats, 8 KB) stays in L1 across the tile's column panels.
constexpr int64_t kKc = 256;
constexpr int64_t kNcMax = 192;  // a multiple of every micro-kernel's nr
// The bf16 path's k chunk: bf16 halves the bytes per k row, so twice the rows fit the same
// cache budget (and the f32 partial sums in y are revisited half as often).
constexpr int64_t kKcBf16 = 512;
// Rows of B that matmul_bf16 packs at a time across a tile's panels (Bf16Job::pack_rows).
constexpr int64_t kMatmulPackRows = 16;
constexpr int64_t kBf16PackRows = 64;  // even, so sub-panels start on a pair row

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T>
struct AlignedBuffer {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data;
  int64_t size = 0;
  T* get(int64_t n) {
    if (n > size) {
      const size_t bytes = (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
      data.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      size = n;
    }
    return data.get();
  }
};
using AlignedFloats = AlignedBuffer<float>;

std::atomic<ConvKernelChoice> g_choice{ConvKernelChoice::kAuto};

// The AVX-512 tile needs AVX-512 F/BW/VL/DQ: any level from avx512 up (isa.h), so
// SAMPAN_CPU_ISA=avx2 or avx2_vnni selects the AVX2 tile.
bool avx512_tile_ok() { return has_avx512(); }

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
    // (c, ky, kx) of row k0, then stepped row by row: three integer divisions per row cost
    // about as much as gathering its 16-32 pixels.
    int64_t c = k0 / khw;
    int64_t ky = (k0 % khw) / s.kw;
    int64_t kx = k0 % s.kw;
    for (int64_t r = 0; r < kc; ++r, ++kx) {
      if (kx == s.kw) {
        kx = 0;
        if (++ky == s.kh) {
          ky = 0;
          ++c;
        }
      }
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
        // Outputs [lo, hi) read inside the row; at stride 1 without the divisions.
        const int64_t lo = ix0 >= 0     ? 0
                           : sw == 1    ? std::min(run.len, -ix0)
                                        : std::min(run.len, ceil_div(-ix0, sw));
        const int64_t hi = ix0 > s.w - 1 ? 0
                           : sw == 1     ? std::min(run.len, s.w - ix0)
                                         : std::min(run.len, (s.w - 1 - ix0) / sw + 1);
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

// ---- bf16 precision -------------------------------------------------------------------------

// The portable bf16 tile: the vdpbf16ps tile's inputs and pair layout, computed with f32
// multiply-adds (every product of two bf16 numbers is exact in f32), for CPUs without
// AVX512-BF16. Slow but the same rounding, so results differ from the native tile by f32
// summation order only.
constexpr int kPortableMr = 4;
constexpr int kPortableNr = 16;

void portable_bf16_tile(int m, int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp,
                        float* c, int64_t ldc, bool accumulate, bool last, const float* bias,
                        const float* res, const ConvEpilogue* ep) {
  constexpr int nr = kPortableNr;
  for (int i = 0; i < m; ++i) {
    float acc[nr] = {};
    const uint16_t* ai = a + i * lda;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const float av = bf16_to_f32(ai[kk]);
      const uint16_t* b = bp + (kk / 2) * 2 * nr + (kk % 2);
      for (int j = 0; j < nr; ++j) acc[j] += av * bf16_to_f32(b[2 * j]);
    }
    float* ci = c + i * ldc;
    for (int j = 0; j < nr; ++j) {
      float v = acc[j] + (accumulate ? ci[j] : 0.0f);
      if (last) {
        if (bias) v += bias[i];
        if (res) v += res[i * ldc + j];
        if (ep->act != ConvActivation::kSigmoid) conv_activate(*ep, &v, 1);
      }
      ci[j] = v;
    }
  }
}

// Fills a [ceil(kc / 2)][nr][2] panel: element (r, j) from get(r, j), 0 for an odd kc's last row.
template <typename Get>
void portable_pack(int64_t kc, uint16_t* dst, Get get) {
  constexpr int nr = kPortableNr;
  for (int64_t kk = 0; kk < (kc + 1) / 2 * 2; ++kk) {
    uint16_t* d = dst + (kk / 2) * 2 * nr + (kk % 2);
    for (int j = 0; j < nr; ++j) d[2 * j] = kk < kc ? get(kk, j) : uint16_t{0};
  }
}

void portable_pack_f32(const float* src, int64_t kc, uint16_t* dst) {
  portable_pack(kc, dst, [&](int64_t r, int j) { return f32_to_bf16(src[r * kPortableNr + j]); });
}

void portable_pack_bf16(const uint16_t* src, int64_t ld, int64_t kc, int64_t ncols,
                        uint16_t* dst) {
  portable_pack(kc, dst,
                [&](int64_t r, int j) { return j < ncols ? src[r * ld + j] : uint16_t{0}; });
}

void portable_pack_f32_rows(const float* src, int64_t ld, int64_t kc, int64_t ncols,
                            uint16_t* dst) {
  portable_pack(kc, dst, [&](int64_t r, int j) {
    return j < ncols ? f32_to_bf16(src[r * ld + j]) : uint16_t{0};
  });
}

bool bf16_native_ok() {
  return has_avx512_bf16() &&
         g_choice.load(std::memory_order_relaxed) != ConvKernelChoice::kAvx2 &&
         (avx512_tile_ok() || g_choice.load(std::memory_order_relaxed) == ConvKernelChoice::kAvx512);
}

conv_detail::Bf16Kernels pick_bf16_kernels() {
  if (bf16_native_ok()) {
    // AMX unless the level is lowered below it or the vdpbf16ps tile is asked for by name.
    if (has_amx() && g_choice.load(std::memory_order_relaxed) == ConvKernelChoice::kAuto) {
      return conv_detail::bf16_kernels_amx();
    }
    return conv_detail::bf16_kernels_avx512();
  }
  return {.mr = kPortableMr, .nr = kPortableNr, .fn = portable_bf16_tile,
          .pack_f32 = portable_pack_f32, .pack_bf16 = portable_pack_bf16,
          .pack_f32_rows = portable_pack_f32_rows};
}

// One bf16 GEMM per item (an image and group): Y[m, p] (+)= A[m, k] · B[k, p] with A bf16 rows
// k apart (a_at(item)), B packed panel by panel by pack(item, k0, kc, col0, ncols, dst), Y rows
// p apart at y + y_off(item). Tiled like conv_gemm: column tiles of at most kNcMax pixels whose
// packed B stays in L2, output channels split when there are too few tiles for the workers.
struct Bf16Job {
  int64_t items = 1, groups = 1;  // item = image * groups + group
  int64_t m = 0, k = 0, p = 0;
  int64_t lda = 0;                 // A's row stride; 0: k
  const float* bias = nullptr;     // [groups * m] or null
  const float* residual = nullptr; // like y, or null
  float* y = nullptr;
  int64_t ldy = 0;                 // Y's (and residual's) row stride; 0: p
  ConvEpilogue ep;
  // 0: each k-chunk's panels are packed one after the other, all kc rows each. Else the chunk
  // is packed pack_rows rows (even) at a time across all panels, so that a B stored row-major
  // (matmul_bf16) is read in runs of the tile's width per row instead of one panel's 64 bytes
  // per row at a time: with rows 2-11 KiB apart those did not stream.
  int64_t pack_rows = 0;
  // A row-major B ([k, p] bf16, ldb apart) that the packer reads (matmul_bf16): the next
  // k-chunk's rows of a task's columns are prefetched into L2 while the current chunk's tiles
  // run (RowsPrefetch says why). Null for the convolutions, whose packers gather from images.
  const uint16_t* b_rows = nullptr;
  int64_t ldb = 0;
  // matmul_bf16's column epilogue (bias per column of Y), applied to each finished block.
  MatmulEpilogue col_ep;
};

struct Bf16Scratch {
  AlignedBuffer<uint16_t> tile;  // [panels][ceil(kc / 2)][nr][2]
  AlignedFloats panel;           // one f32 panel [kc][nr] before rounding (convs)
  std::vector<Run> runs;
};

// The column epilogue on rows x ncols finished outputs c (row stride ldc) of columns col...
inline void finish_columns(const MatmulEpilogue& ep, int rows, int64_t ncols, float* c,
                           int64_t ldc, int64_t col) {
  bias_activation_rows(rows, ncols, c, ldc, ep.alpha, ep.bias ? ep.bias + col : nullptr, ep.act);
}

template <typename AAt, typename YOff, typename Pack>
void gemm_bf16(const Bf16Job& job, AAt a_at, YOff y_off, Pack pack, TaskRunner& runner) {
  const conv_detail::Bf16Kernels bk = pick_bf16_kernels();
  const int nr = bk.nr;
  const int mr = bk.mr;
  const int64_t n_panels = ceil_div(job.p, nr);
  const int64_t workers = runner.concurrency();
  // Column tiles of near-equal panel counts, as many as a multiple of the workers where few
  // tiles would leave one worker a tile behind the others: matmul_bf16 with n = 2048 (64
  // panels) made 11 tiles of 6 panels, 6 for one of two workers and 5 for the other, and the
  // dx of a training step ran 1.55-1.7x its one-thread speed on two (0.92x at best by the count).
  int64_t n_ptiles = ceil_div(n_panels, kNcMax / nr);
  if (job.items * n_ptiles < 8 * workers && (job.items * n_ptiles) % workers != 0) {
    const int64_t per_item = ceil_div(ceil_div(job.items * n_ptiles, workers) * workers, job.items);
    n_ptiles = std::min(n_panels, std::max(n_ptiles, per_item));
  }
  const int64_t max_tile_panels = ceil_div(n_panels, n_ptiles);
  const int64_t base = job.items * n_ptiles;
  const int64_t row_blocks = ceil_div(job.m, mr);
  const int64_t want = 2 * workers;
  const int64_t n_ochunks = base >= want ? 1 : std::min(row_blocks, ceil_div(want, base));
  const int64_t rows_per_chunk = ceil_div(row_blocks, n_ochunks) * mr;
  const int64_t n_oc = ceil_div(job.m, rows_per_chunk);
  const int64_t kc_max = std::min(kKcBf16, job.k);
  const int64_t lda = job.lda > 0 ? job.lda : job.k;
  const int64_t ldy = job.ldy > 0 ? job.ldy : job.p;
  const int64_t panel_elems = (kc_max + 1) / 2 * 2 * nr;  // bf16 per packed panel
  runner.run(base * n_oc, [&](int64_t task) {
    thread_local Bf16Scratch scratch;
    const int64_t oc = task % n_oc;
    const int64_t pt = (task / n_oc) % n_ptiles;
    const int64_t item = task / (n_oc * n_ptiles);
    const int64_t j0 = pt * n_panels / n_ptiles * nr;
    const int64_t nc = std::min((pt + 1) * n_panels / n_ptiles * nr, job.p) - j0;
    const int64_t o0 = oc * rows_per_chunk;
    const int64_t o1 = std::min(job.m, o0 + rows_per_chunk);
    if (nc <= 0 || o0 >= o1) return;
    const uint16_t* ag = a_at(item);
    const int64_t yo = y_off(item);
    float* yg = job.y + yo;
    const float* rg = job.residual ? job.residual + yo : nullptr;
    const float* bg = job.bias ? job.bias + (item % job.groups) * job.m : nullptr;
    uint16_t* tile = scratch.tile.get(max_tile_panels * panel_elems);
    alignas(64) float tmp_c[conv_detail::kBf16TileMaxElems];
    alignas(64) float tmp_r[conv_detail::kBf16TileMaxElems];
    RowsPrefetch prefetch;
    if (bk.begin) bk.begin();
    for (int64_t k0 = 0; k0 < job.k; k0 += kKcBf16) {
      const int64_t kc = std::min(kKcBf16, job.k - k0);
      const int64_t rb = job.pack_rows > 0 ? job.pack_rows : kc;
      for (int64_t r0 = 0; r0 < kc; r0 += rb) {  // r0 even: pair row r0 / 2 of each panel
        for (int64_t pi = 0; pi * nr < nc; ++pi) {
          const int64_t col = j0 + pi * nr;
          pack(scratch, bk, item, k0 + r0, std::min(rb, kc - r0), col,
               std::min<int64_t>(nr, j0 + nc - col), tile + pi * panel_elems + r0 * nr);
        }
      }
      const bool accumulate = k0 > 0;
      const bool last = k0 + kc == job.k;
      if (job.b_rows != nullptr && !last) {
        const int64_t k1 = k0 + kc;
        prefetch.start_strided(job.b_rows + k1 * job.ldb + j0,
                               job.ldb * static_cast<int64_t>(sizeof(uint16_t)),
                               std::min(kKcBf16, job.k - k1),
                               nc * static_cast<int64_t>(sizeof(uint16_t)),
                               ceil_div(o1 - o0, mr) * ceil_div(nc, nr));
      } else {
        prefetch.stop();
      }
      for (int64_t i = o0; i < o1; i += mr) {
        const int m = static_cast<int>(std::min<int64_t>(mr, o1 - i));
        const uint16_t* a = ag + i * lda + k0;
        const float* bi = bg ? bg + i : nullptr;
        for (int64_t pi = 0; pi * nr < nc; ++pi) {
          const int64_t col = j0 + pi * nr;
          const int64_t ncols = std::min<int64_t>(nr, j0 + nc - col);
          float* c = yg + i * ldy + col;
          const float* r = rg ? rg + i * ldy + col : nullptr;
          const uint16_t* panel = tile + pi * panel_elems;
          prefetch.step();
          const bool col_ep = last && job.col_ep.any();
          if (ncols == nr) {
            bk.fn(m, kc, a, lda, panel, c, ldy, accumulate, last, bi, r, &job.ep);
            if (col_ep) finish_columns(job.col_ep, m, ncols, c, ldy, col);
            continue;
          }
          // A partial panel goes through a full-width copy (the tile writes nr columns).
          const size_t row_bytes = static_cast<size_t>(ncols) * sizeof(float);
          for (int row = 0; row < m; ++row) {
            if (accumulate) std::memcpy(tmp_c + row * nr, c + row * ldy, row_bytes);
            if (last && r) std::memcpy(tmp_r + row * nr, r + row * ldy, row_bytes);
          }
          bk.fn(m, kc, a, lda, panel, tmp_c, nr, accumulate, last, bi,
                last && r ? tmp_r : nullptr, &job.ep);
          for (int row = 0; row < m; ++row) {
            std::memcpy(c + row * ldy, tmp_c + row * nr, row_bytes);
          }
          if (col_ep) finish_columns(job.col_ep, m, ncols, c, ldy, col);
        }
      }
    }
    if (bk.end) bk.end();
    if (job.ep.act == ConvActivation::kSigmoid) {
      for (int64_t i = o0; i < o1; ++i) conv_activate(job.ep, yg + i * ldy + j0, nc);
    }
  });
}

Geometry make_geometry(const ConvShape& s) {
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
  return g;
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
  const Geometry g = make_geometry(s);
  if (s.n <= 0 || s.o <= 0 || g.p <= 0) return;
  if (g.cg == 1 && s.group > 1) {
    conv_direct(g, x, w, bias, residual, ep, y, runner);
    return;
  }
  conv_gemm(g, x, w, bias, residual, ep, y, runner);
}

}  // namespace sampan::cpu

namespace sampan::cpu {

bool conv_bf16_native() { return bf16_native_ok(); }

void conv2d_bf16(const ConvShape& s, const float* x, const uint16_t* w, const float* bias,
                 const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner) {
  const Geometry g = make_geometry(s);
  if (s.n <= 0 || s.o <= 0 || g.p <= 0) return;
  Bf16Job job;
  job.items = s.n * s.group;
  job.groups = s.group;
  job.m = g.og;
  job.k = g.k;
  job.p = g.p;
  job.bias = bias;
  job.residual = residual;
  job.y = y;
  job.ep = ep;
  auto a_at = [&](int64_t item) { return w + (item % s.group) * g.og * g.k; };
  auto y_off = [&](int64_t item) { return item * g.og * g.p; };
  auto pack = [&](Bf16Scratch& sc, const conv_detail::Bf16Kernels& bk, int64_t item, int64_t k0,
                  int64_t kc, int64_t col, int64_t ncols, uint16_t* dst) {
    const float* xg = x + (item / s.group * s.c + item % s.group * g.cg) * s.h * s.w;
    if (g.pointwise) {  // B's rows are the image's planes: rounded and paired in one pass
      bk.pack_f32_rows(xg + k0 * g.p + col, g.p, kc, ncols, dst);
      return;
    }
    // The im2col gather goes through an f32 panel of kBf16PackRows rows (8 KB, stays in L1)
    // that is rounded into the pair layout right away.
    float* f = sc.panel.get(kBf16PackRows * bk.nr);
    for (int64_t r0 = 0; r0 < kc; r0 += kBf16PackRows) {
      const int64_t rows = std::min(kBf16PackRows, kc - r0);
      pack_tile(g, xg, k0 + r0, rows, col, ncols, bk.nr, f, sc.runs);
      bk.pack_f32(f, rows, dst + r0 * bk.nr);  // r0 even: pair row r0 / 2
    }
  };
  gemm_bf16(job, a_at, y_off, pack, runner);
}

void matmul_bf16_a16(int64_t m, int64_t k, int64_t n, const uint16_t* a, int64_t lda,
                     const uint16_t* b, int64_t ldb, float* y, int64_t ldy, TaskRunner& runner,
                     const MatmulEpilogue& ep) {
  if (m <= 0 || n <= 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(y + i * ldy, y + i * ldy + n, 0.0f);
    if (ep.any()) bias_activation(m, n, y, ldy, ep.alpha, ep.bias, ep.act, runner);
    return;
  }
  Bf16Job job;
  job.m = m;
  job.k = k;
  job.lda = lda;
  job.p = n;
  job.y = y;
  job.ldy = ldy;
  job.pack_rows = kMatmulPackRows;
  job.b_rows = b;
  job.ldb = ldb;
  job.col_ep = ep;
  auto a_at = [&](int64_t) { return a; };
  auto y_off = [](int64_t) { return int64_t{0}; };
  auto pack = [&](Bf16Scratch&, const conv_detail::Bf16Kernels& bk, int64_t, int64_t k0,
                  int64_t kc, int64_t col, int64_t ncols, uint16_t* dst) {
    bk.pack_bf16(b + k0 * ldb + col, ldb, kc, ncols, dst);
  };
  gemm_bf16(job, a_at, y_off, pack, runner);
}

void matmul_bf16_a16(int64_t m, int64_t k, int64_t n, const uint16_t* a, int64_t lda,
                     const uint16_t* b, float* y, TaskRunner& runner, const MatmulEpilogue& ep) {
  matmul_bf16_a16(m, k, n, a, lda, b, n, y, n, runner, ep);
}

void matmul_bf16(int64_t m, int64_t k, int64_t n, const float* a, const uint16_t* b, float* y,
                 TaskRunner& runner, const MatmulEpilogue& ep) {
  if (m <= 0 || n <= 0) return;
  // a rounded once per call (m·k, small next to the m·k·n product), read in place by the tile.
  thread_local std::vector<uint16_t> a16;
  a16.resize(static_cast<size_t>(m * k));
  uint16_t* const a_bf = a16.data();  // the workers see their own thread_locals, not this one
  const int64_t chunk = std::max<int64_t>(1, ceil_div(m, runner.concurrency()));
  runner.run(ceil_div(m, chunk), [&](int64_t t) {
    const int64_t r0 = t * chunk;
    const int64_t r1 = std::min(m, r0 + chunk);
    convert_f32_to_bf16(a + r0 * k, a_bf + r0 * k, (r1 - r0) * k);
  });
  matmul_bf16_a16(m, k, n, a_bf, k, b, y, runner, ep);
}

}  // namespace sampan::cpu
