// Convolution and pooling on the CPU in a blocked channel layout ("NCHWc"), f32.
//
// Layout. A blocked tensor of C channels with block B is [n, ceil(C / B), h, w, B]: the B
// channels of one pixel are one contiguous vector (B = 16 is one zmm register / cache line,
// B = 8 one ymm). Channels past C in the last block are padding: reorder_to_nchwc writes them
// as zeros, a conv writes whatever its epilogue gives for a zero weight row (finite), and every
// consumer ignores them (a conv's weights are zero for padded input channels, reorder_to_nchw
// drops them), so their values never reach a result.
//
// Convolution (conv_nchwc_cpu.cc; register tiles in conv_nchwc_avx512.cc / conv_nchwc_avx2.cc)
// is direct, without im2col: per task (image, group of output blocks, output row) a register
// tile of up to 14 pixels x 2 output blocks (AVX-512, B = 16) or 6 pixels x 2 ymm (AVX2)
// accumulates over input blocks, kernel rows and columns and the input channels of a block:
// broadcast one input value, one FMA per output vector. Rows with horizontal padding are copied
// once per task into a zero-padded row buffer so the tiles carry no bounds checks; rows of
// vertical padding are skipped. 1x1 stride-1 unpadded convs treat the whole plane as one run of
// pixels and, on the AVX2 tile, run over chunks of 64 input channels with the partial sums
// kept in y (the chunk of input stays in L1 across the output blocks, a block pair's weights
// across the run's tiles; the FMA order is unchanged, so is every result). The input may also be plain NCHW (b_in = 1: a stem conv on an RGB image, whose few
// channels would be mostly padding in blocks); the output is always blocked.
//
// What a caller may rely on: x, w, bias, residual, y contiguous; y must not overlap an input.
// Accuracy: f32 FMAs summed in (input block, kh, kw, channel) order, ~1e-6 relative to
// sum |x||w|; the result does not depend on the runner.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/pool_cpu.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

struct NchwcConvShape {
  int64_t n = 1;
  int64_t in_blocks = 1;  // blocked input: ceil(c / block); plain input: c
  int64_t b_in = 1;       // channels per input block: block (blocked input) or 1 (plain NCHW)
  int64_t h = 1, w = 1;
  int64_t out_blocks = 1;  // ceil(o / block)
  int64_t block = 16;      // 8 or 16
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t out_h() const { return (h + pad_t + pad_b - dil_h * (kh - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (w + pad_l + pad_r - dil_w * (kw - 1) - 1) / stride_w + 1; }
};

// x: [n, in_blocks, h, w, b_in]; w: [out_blocks, in_blocks, kh, kw, b_in, block];
// bias: [out_blocks * block] or null; residual: y's layout or null;
// y: [n, out_blocks, out_h, out_w, block]. y = act(conv(x, w) + bias + residual).
void conv2d_nchwc(const NchwcConvShape& s, const float* x, const float* w, const float* bias,
                  const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner);

// bf16 variant (block 16): x is rounded to bf16 (nearest even) as the driver copies each
// task's input rows, w is bf16 in pairs of input channels, and each vdpbf16ps multiplies one
// pixel's channel pair with 16 output channels' pair of weights, summing in f32: the work of
// two FMAs per instruction (conv_nchwc_bf16_avx512.cc).
// Accuracy: every product of two bf16 values is exact in f32; against the exact conv of the
// unrounded operands the error is the rounding of x and w (up to 2^-8 relative each) plus the
// f32 summation term above. The precision of conv2d_bf16 (conv_cpu.h), whose GEMM computes the
// same products in another order.
// x: [n, in_blocks, h, w, 16] f32; w: [out_blocks, in_blocks, kh, kw, 8, 16, 2] bf16 bits
// (element [.., p, o, j] is input channel 2 p + j of the block for output o; zero for padded
// channels); bias, residual, y as conv2d_nchwc. Plain input (b_in = 1: the stem, x [n, c, h, w])
// pairs kernel columns instead: kw even and dil_w 1 (an odd kernel gets a zero column and one
// more column of right padding, which gives the same outputs), w [out_blocks, c, kh, kw / 2, 1,
// 16, 2] with element [.., q, 0, o, j] = kernel column 2 q + j. Only where the CPU has
// AVX512-BF16 at the active level (nchwc_bf16_runs(true)); nchwc_bf16_runs() says where it pays.
void conv2d_nchwc_bf16(const NchwcConvShape& s, const float* x, const uint16_t* w,
                       const float* bias, const float* residual, const ConvEpilogue& ep, float* y,
                       TaskRunner& runner);

// Whether conv2d_nchwc_bf16 runs here and is the faster bf16 conv: the AVX-512 tile level with
// AVX512-BF16 issued at the FMA rate (not CpuFeatures::dpbf16_half_rate, where it would only
// match the f32 tile), below the amx level (AMX keeps conv2d_bf16's tiles), and the conv
// kernel choice not lowered to AVX2. force: only the instruction set (tests).
bool nchwc_bf16_runs(bool force = false);

// The block the blocked conv runs fastest with on this CPU: 16 where the AVX-512 tile runs
// (same rule as the NCHW conv's, conv_cpu.h), else 8.
int64_t nchwc_preferred_block();

// Which register tiles conv2d_nchwc uses (kAuto: the AVX-512 tile for block 16 where it runs,
// else AVX2; a block-8 tensor always runs the AVX2 tile). For tests and benchmarks; not to race
// with running convs.
void set_nchwc_kernel(ConvKernelChoice choice);
bool nchwc_kernel_available(ConvKernelChoice choice);

// x: [n, c, hw] -> y: [n, ceil(c / block), hw, block], padded channels zero.
void reorder_to_nchwc(int64_t n, int64_t c, int64_t hw, int64_t block, const float* x, float* y,
                      TaskRunner& runner);
// x: [n, ceil(c / block), hw, block] -> y: [n, c, hw] (padded channels dropped).
void reorder_to_nchw(int64_t n, int64_t c, int64_t hw, int64_t block, const float* x, float* y,
                     TaskRunner& runner);

// Pooling of a blocked tensor with pool2d's semantics (pool_cpu.h); s.c is the number of
// channel blocks times block. x: [s.n, s.c / block, s.h, s.w, block];
// y: [s.n, s.c / block, s.ho, s.wo, block].
void pool2d_nchwc(const PoolShape& s, int64_t block, const float* x, float* y,
                  TaskRunner& runner);

namespace nchwc_detail {

// One register tile: `pixels` output pixels of one row run x `nb` output blocks.
struct TileArgs {
  const float* x = nullptr;  // the first pixel's first tap (input block 0, first kernel row)
  // The bf16 tile reads these instead of x and w: the same element offsets and strides (x as
  // bf16 copies of the input, w in channel pairs [.., b_in / 2, block, 2]).
  const uint16_t* x16 = nullptr;
  const uint16_t* w16 = nullptr;
  int64_t x_pix = 0;         // floats between neighbouring output pixels' taps
  int64_t x_kx = 0;          // floats between kernel columns' taps
  int64_t x_ky = 0;          // floats between kernel rows' taps
  int64_t x_cb = 0;          // floats between input blocks
  int64_t n_cb = 0, n_ky = 0, n_kx = 0, b_in = 0;
  // The first output block's weights [n_cb][kh][kw][b_in][block], at the first kernel row
  // the tile reads (rows outside the input are skipped by starting later).
  const float* w = nullptr;
  int64_t w_ky = 0;          // floats between kernel rows' weights (kw * b_in * block)
  int64_t w_cb = 0;          // floats between input blocks' weights (kh * kw * b_in * block)
  int64_t w_ob = 0;          // floats between output blocks' weights
  float* y = nullptr;        // the first pixel of the first block; pixels are `block` apart
  int64_t y_ob = 0;          // floats between output blocks in y (and residual)
  const float* res = nullptr;   // y's layout, or null
  const float* bias = nullptr;  // [nb * block] or null
  const ConvEpilogue* ep = nullptr;
  // Input-channel chunking (TileKernel::accumulates): the sums start from y's values instead of
  // zero, and unless `last` they are stored as they are (no bias, residual or activation).
  bool accumulate = false;
  bool last = true;
};

using TileFn = void (*)(const TileArgs& a, int pixels, int nb);

struct TileKernel {
  int64_t block = 0;       // the block it computes
  int max_pixels = 0;      // pixels per tile
  int max_blocks = 0;      // output blocks per tile
  TileFn fn = nullptr;     // sigmoid is left to the caller (applied after the store)
  bool accumulates = false;  // honours TileArgs::accumulate / last
};

TileKernel tile_kernel_avx512();           // block 16
TileKernel tile_kernel_avx2(int64_t block);  // block 8 or 16
TileKernel tile_kernel_bf16_avx512();      // block 16, x16 / w16, AVX512-BF16 only

}  // namespace nchwc_detail
}  // namespace sampan::cpu
