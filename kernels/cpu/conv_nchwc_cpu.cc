// The blocked conv driver (conv_nchwc_cpu.h): splits the output into row runs and output-block
// groups, builds zero-padded input rows where the conv pads horizontally, and runs the register
// tiles of conv_nchwc_avx512.cc / conv_nchwc_avx2.cc over each run.
#include "kernels/cpu/conv_nchwc_cpu.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu {
namespace {

using nchwc_detail::TileArgs;
using nchwc_detail::TileKernel;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Input channels per chunk of a pointwise conv (see conv2d_nchwc): at 64 a 48-pixel run's chunk
// of input is 12 KiB and a block pair's weights 4 KiB, both in L1.
constexpr int64_t kPointwiseChunkChannels = 64;
// The bf16 tile's: its chunk's input is half the bytes and its partial sums twice the cost
// relative to its products. ResNet-50's 1x1 layers on one Zen 5 core, batch 8, against 64:
// 1.1-1.15x at 256 (256->64 @56 246 GFLOP/s, 1024->256 @14 480, 512->2048 @7 495), no better
// at 512 or with no chunks.
constexpr int64_t kPointwiseChunkChannelsBf16 = 256;

std::atomic<ConvKernelChoice> g_choice{ConvKernelChoice::kAuto};

// The AVX-512 tile (B = 16) needs AVX-512 F/BW/VL/DQ: any level from avx512 up (isa.h).
bool avx512_tile_ok() { return has_avx512(); }

TileKernel pick_tile(int64_t block) {
  if (block != 16) return nchwc_detail::tile_kernel_avx2(block);
  switch (g_choice.load(std::memory_order_relaxed)) {
    case ConvKernelChoice::kAvx2: return nchwc_detail::tile_kernel_avx2(16);
    case ConvKernelChoice::kAvx512:
      if (cpu_features().avx512f) return nchwc_detail::tile_kernel_avx512();
      return nchwc_detail::tile_kernel_avx2(16);
    case ConvKernelChoice::kAuto: break;
  }
  return avx512_tile_ok() ? nchwc_detail::tile_kernel_avx512()
                          : nchwc_detail::tile_kernel_avx2(16);
}

// How the output is cut into tasks: each task is one image, a chunk of consecutive runs of
// output pixels (a run is an output row, or for a pointwise conv a stretch of the flattened
// plane) and a group of output blocks. Inside a task the output blocks are the outer loop and
// the runs the inner one.
struct Plan {
  int64_t ho = 0, wo = 0;
  bool pointwise = false;  // 1x1, stride 1, no pads: the plane is one run of pixels
  bool hpad = false;       // input rows are copied into a zero-padded buffer first
  int64_t wp = 0;          // padded row width (pixels)
  int64_t runs = 0;        // runs per image
  int64_t run_len = 0;     // pixels per run (the last pointwise run may be shorter)
  int64_t runs_per_chunk = 0;
  int64_t chunks = 0;      // run chunks per image
  int64_t groups = 0;      // output block groups
  int64_t blocks_per_group = 0;
};

// run_tiles: a pointwise run's length in tiles (see below).
Plan make_plan(const NchwcConvShape& s, const TileKernel& tk, int concurrency, int run_tiles) {
  Plan p;
  p.ho = s.out_h();
  p.wo = s.out_w();
  p.pointwise = s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_t == 0 &&
                s.pad_l == 0 && s.pad_b == 0 && s.pad_r == 0;
  p.hpad = !p.pointwise && (s.pad_l > 0 || s.pad_r > 0);
  p.wp = s.w + s.pad_l + s.pad_r;
  if (p.pointwise) {
    // Runs of 8 tiles (f32): long enough that the tile loop dominates, short enough to spread a
    // 56x56 plane over many tasks. The bf16 tile takes 16: its task first copies the run's
    // input, a few KB per input block from as many places, and longer runs stream those from
    // memory better (ResNet-50 bf16, batch 8, 2 threads, Zen 5: 1.02-1.04x; 256 -> 64 at 56x56
    // on one core 1.2x).
    const int64_t plane = p.ho * p.wo;
    const int64_t want = tk.max_pixels * run_tiles;
    p.runs = ceil_div(plane, want);
    p.run_len = ceil_div(ceil_div(plane, p.runs), tk.max_pixels) * tk.max_pixels;
    p.runs = ceil_div(plane, p.run_len);
  } else {
    p.runs = p.ho;
    p.run_len = p.wo;
  }
  const int64_t tiles_of_blocks = ceil_div(s.out_blocks, tk.max_blocks);
  const int64_t want = 4 * static_cast<int64_t>(concurrency);
  // One run per chunk: keeping a block pair's weights in L2 across the rows of a chunk (late
  // layers, where the weights outweigh the image) measured slower on Zen 4 than streaming them
  // from L3 once per row while the row's input stays in L1.
  const int64_t chunks = p.runs;
  int64_t groups = 1;
  if (s.n * p.runs < want) {
    // Too few runs for the workers (small planes, batch 1): split the output blocks too; each
    // group re-reads (and for padded convs re-copies) its input rows, which costs little there.
    groups = std::min(tiles_of_blocks, ceil_div(want, s.n * p.runs));
  }
  p.runs_per_chunk = ceil_div(p.runs, chunks);
  p.chunks = ceil_div(p.runs, p.runs_per_chunk);
  p.blocks_per_group = ceil_div(tiles_of_blocks, groups) * tk.max_blocks;
  p.groups = ceil_div(s.out_blocks, p.blocks_per_group);
  return p;
}

// Where the taps of one run start in memory, and the strides between them.
template <typename T>
struct RunInput {
  const T* x = nullptr;  // the run's first pixel, first tap
  int64_t x_pix = 0, x_kx = 0, x_ky = 0, x_cb = 0;
  int64_t ky0 = 0, n_ky = 0;  // kernel rows inside the input
};

// Kernel rows [ky0, ky1) of output row oy that land inside the input (contiguous: the input row
// grows with ky).
void valid_rows(const NchwcConvShape& s, int64_t oy, int64_t* ky0, int64_t* ky1) {
  const int64_t iy0 = oy * s.stride_h - s.pad_t;
  int64_t lo = 0;
  while (lo < s.kh && iy0 + lo * s.dil_h < 0) ++lo;
  int64_t hi = s.kh;
  while (hi > lo && iy0 + (hi - 1) * s.dil_h >= s.h) --hi;
  *ky0 = lo;
  *ky1 = hi;
}

// The input one chunk of runs reads. f32 (T = float): the image itself, or for a padded conv
// its rows [row0, row0 + n_rows) copied into `buf` as [in_blocks][n_rows][wp][b_in] with zero
// columns on both sides. bf16 (T = uint16_t): always a copy, rounded to bf16: those rows (pads
// of zero or more columns), or for a pointwise conv the chunk's pixels, [in_blocks][pixels][b_in].
template <typename T>
struct ChunkInput {
  const T* x = nullptr;      // row row0 (pointwise: run first_run's first pixel) of input block 0
  int64_t row0 = 0, n_rows = 0;
  int64_t first_run = 0;     // pointwise: the run x starts at
  int64_t row_elems = 0;     // elements between rows
  int64_t block_elems = 0;   // elements between input blocks
};

// n elements of src into dst: copied (f32) or rounded to bf16.
inline void put(const float* src, int64_t n, float* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
inline void put(const float* src, int64_t n, uint16_t* dst) { convert_f32_to_bf16(src, dst, n); }

template <typename T>
ChunkInput<T> chunk_input(const NchwcConvShape& s, const Plan& p, const float* x, int64_t img,
                          int64_t r0, int64_t r1, std::vector<T>& buf) {
  constexpr bool kCopyAlways = !std::is_same_v<T, float>;
  ChunkInput<T> c;
  const int64_t b = s.b_in;
  const float* xi = x + img * s.in_blocks * s.h * s.w * b;
  if (p.pointwise && kCopyAlways) {
    const int64_t plane = s.h * s.w;
    const int64_t pix0 = r0 * p.run_len, pix1 = std::min(plane, r1 * p.run_len);
    c.first_run = r0;
    c.block_elems = (pix1 - pix0) * b;
    buf.resize(static_cast<size_t>(std::max<int64_t>(1, s.in_blocks * c.block_elems)));
    for (int64_t cb = 0; cb < s.in_blocks; ++cb) {
      put(xi + (cb * plane + pix0) * b, c.block_elems, buf.data() + cb * c.block_elems);
    }
    c.x = buf.data();
    return c;
  }
  if constexpr (!kCopyAlways) {
    if (!p.hpad) {
      c.x = xi;
      c.n_rows = s.h;
      c.row_elems = s.w * b;
      c.block_elems = s.h * s.w * b;
      return c;
    }
  }
  const int64_t lo = std::max<int64_t>(0, r0 * s.stride_h - s.pad_t);
  const int64_t hi =
      std::min(s.h, (r1 - 1) * s.stride_h - s.pad_t + (s.kh - 1) * s.dil_h + 1);
  c.row0 = lo;
  c.n_rows = std::max<int64_t>(0, hi - lo);
  c.row_elems = p.wp * b;
  c.block_elems = c.n_rows * c.row_elems;
  buf.resize(static_cast<size_t>(std::max<int64_t>(1, s.in_blocks * c.block_elems)));
  T* d = buf.data();
  for (int64_t cb = 0; cb < s.in_blocks; ++cb) {
    for (int64_t iy = lo; iy < hi; ++iy, d += c.row_elems) {
      std::fill(d, d + s.pad_l * b, T{0});
      put(xi + (cb * s.h + iy) * s.w * b, s.w * b, d + s.pad_l * b);
      std::fill(d + (s.pad_l + s.w) * b, d + c.row_elems, T{0});
    }
  }
  c.x = buf.data();
  return c;
}

template <typename T>
RunInput<T> run_input(const NchwcConvShape& s, const Plan& p, const ChunkInput<T>& c,
                      int64_t run) {
  RunInput<T> r;
  const int64_t b = s.b_in;
  if (p.pointwise) {
    r.x = c.x + (run - c.first_run) * p.run_len * b;
    r.x_pix = b;
    r.x_cb = c.block_elems;
    r.n_ky = 1;
    return r;
  }
  int64_t ky0 = 0, ky1 = 0;
  valid_rows(s, run, &ky0, &ky1);
  r.ky0 = ky0;
  r.n_ky = ky1 - ky0;
  r.x_pix = s.stride_w * b;
  r.x_kx = s.dil_w * b;
  r.x_ky = s.dil_h * c.row_elems;
  r.x_cb = c.block_elems;
  const int64_t iy0 = run * s.stride_h - s.pad_t + ky0 * s.dil_h;  // first valid input row
  r.x = c.x + (r.n_ky > 0 ? iy0 - c.row0 : 0) * c.row_elems;
  return r;
}

// Both precisions' driver: w is float (conv2d_nchwc) or bf16 pairs (conv2d_nchwc_bf16), whose
// element offsets are the same; the input goes to the tile as T.
template <typename T>
void run_conv(const NchwcConvShape& s, const TileKernel& tk, const float* x, const T* w,
              const float* bias, const float* residual, const ConvEpilogue& ep, float* y,
              TaskRunner& runner) {
  const Plan p = make_plan(s, tk, runner.concurrency(), std::is_same_v<T, float> ? 8 : 16);
  if (s.n <= 0 || s.out_blocks <= 0 || p.ho <= 0 || p.wo <= 0) return;
  const int64_t bl = s.block;
  const int64_t plane = p.ho * p.wo;
  const int64_t w_ky = s.kw * s.b_in * bl;
  const int64_t w_cb = s.kh * w_ky;
  const int64_t w_ob = s.in_blocks * w_cb;
  const bool sigmoid = ep.act == ConvActivation::kSigmoid;
  // bf16 with plain input (the stem): a tap is a pair of kernel columns (kw even, dil_w 1).
  const bool kx_pairs = !std::is_same_v<T, float> && s.b_in == 1;
  // Pointwise convs run over chunks of input blocks (partial sums in y) where the tile can
  // accumulate: the chunk of the run's input then stays in L1 across every output block and a
  // block pair's weights for the chunk across the run's tiles, instead of each 6-pixel tile
  // streaming [C, 2B] weights from L2.
  constexpr int64_t kChunkChannels =
      std::is_same_v<T, float> ? kPointwiseChunkChannels : kPointwiseChunkChannelsBf16;
  const int64_t cb_chunk = p.pointwise && tk.accumulates
                               ? std::max<int64_t>(1, kChunkChannels / s.b_in)
                               : s.in_blocks;

  runner.run(s.n * p.chunks * p.groups, [&](int64_t task) {
    thread_local std::vector<T> buf;
    const int64_t chunk = task % p.chunks;
    const int64_t grp = (task / p.chunks) % p.groups;
    const int64_t img = task / (p.chunks * p.groups);
    const int64_t ob0 = grp * p.blocks_per_group;
    const int64_t ob1 = std::min(s.out_blocks, ob0 + p.blocks_per_group);
    const int64_t r0 = chunk * p.runs_per_chunk;
    const int64_t r1 = std::min(p.runs, r0 + p.runs_per_chunk);
    const ChunkInput<T> cin = chunk_input(s, p, x, img, r0, r1, buf);
    TileArgs a;
    a.n_kx = kx_pairs ? s.kw / 2 : s.kw;
    a.b_in = s.b_in;
    a.w_ky = w_ky;
    a.w_cb = w_cb;
    a.w_ob = w_ob;
    a.y_ob = plane * bl;
    a.ep = &ep;
    for (int64_t cb0 = 0; cb0 < s.in_blocks; cb0 += cb_chunk) {
      a.n_cb = std::min(cb_chunk, s.in_blocks - cb0);
      a.accumulate = cb0 > 0;
      a.last = cb0 + a.n_cb == s.in_blocks;
      for (int64_t ob = ob0; ob < ob1; ob += tk.max_blocks) {
        const int nb = static_cast<int>(std::min<int64_t>(tk.max_blocks, ob1 - ob));
        a.bias = bias ? bias + ob * bl : nullptr;
        for (int64_t run = r0; run < r1; ++run) {
          const RunInput<T> in = run_input(s, p, cin, run);
          const int64_t pix0 = run * p.run_len;  // the run's first pixel within the plane
          const int64_t len = std::min(p.run_len, plane - pix0);
          const int64_t y_off = ((img * s.out_blocks + ob) * plane + pix0) * bl;
          a.x_pix = in.x_pix;
          a.x_kx = kx_pairs ? 2 * in.x_kx : in.x_kx;
          a.x_ky = in.x_ky;
          a.x_cb = in.x_cb;
          a.n_ky = in.n_ky;
          const T* wt = w + ob * w_ob + in.ky0 * w_ky + cb0 * w_cb;
          for (int64_t t = 0; t < len; t += tk.max_pixels) {
            const int pixels = static_cast<int>(std::min<int64_t>(tk.max_pixels, len - t));
            const T* xt = in.x + t * in.x_pix + cb0 * in.x_cb;
            if constexpr (std::is_same_v<T, float>) {
              a.x = xt;
              a.w = wt;
            } else {
              a.x16 = xt;
              a.w16 = wt;
            }
            a.y = y + y_off + t * bl;
            a.res = residual ? residual + y_off + t * bl : nullptr;
            tk.fn(a, pixels, nb);
          }
          if (sigmoid && a.last) {
            for (int j = 0; j < nb; ++j) conv_activate(ep, y + y_off + j * plane * bl, len * bl);
          }
        }
      }
    }
  });
}

}  // namespace

int64_t nchwc_preferred_block() { return avx512_tile_ok() ? 16 : 8; }

void set_nchwc_kernel(ConvKernelChoice choice) { g_choice.store(choice); }

bool nchwc_kernel_available(ConvKernelChoice choice) {
  return choice != ConvKernelChoice::kAvx512 || cpu_features().avx512f;
}

void conv2d_nchwc(const NchwcConvShape& s, const float* x, const float* w, const float* bias,
                  const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner) {
  run_conv(s, pick_tile(s.block), x, w, bias, residual, ep, y, runner);
}

bool nchwc_bf16_runs(bool force) {
  if (!has_avx512_bf16() || !avx512_tile_ok()) return false;
  if (force) return true;
  return !has_amx() && !cpu_features().dpbf16_half_rate &&
         g_choice.load(std::memory_order_relaxed) != ConvKernelChoice::kAvx2;
}

void conv2d_nchwc_bf16(const NchwcConvShape& s, const float* x, const uint16_t* w,
                       const float* bias, const float* residual, const ConvEpilogue& ep, float* y,
                       TaskRunner& runner) {
  run_conv(s, nchwc_detail::tile_kernel_bf16_avx512(), x, w, bias, residual, ep, y, runner);
}

}  // namespace sampan::cpu
