// Winograd F(4x4, 3x3) convolution on the CPU in the blocked channel layout (f32, block 16 on
// AVX-512, block 8 on AVX2 + FMA): 3x3, stride 1, dilation 1, group 1, any padding and plane
// size. The blocked layout and its padded channels are conv_nchwc_cpu.h's.
//
// Algorithm (Lavin & Gray's F(4x4, 3x3), interpolation points 0, +-1, +-2, inf). The output plane
// is cut into 4x4 tiles (tiles at the right and bottom edges may hang past it); tile t reads the
// 6x6 input patch around it (zeros outside the input). Per tile and input channel the patch is
// transformed, d -> B^T d B (36 values); per output channel the 3x3 filter, g -> G g G^T (36
// values, once, at pass time: winograd_transform_weights). The 36 positions are then 36
// independent GEMMs over the input channels, M[p] = V[p] · U[p], and the output tile is
// A^T M A (4x4) plus bias, residual and the activation. 36 multiplications per 16 outputs
// instead of 144: 4x fewer, paid with the transforms and with weights 4x larger (36 / 9).
//
// Execution (conv_winograd_cpu.cc; stages in conv_winograd_stages.h). Tiles of all images are
// numbered image-major and cut into groups (14 tiles with zmm, 12 with ymm), so late layers
// gather tiles of several images; a task is (tile group, chunk of output blocks). It transforms
// its tiles' patches for every input block into V [36][in_blocks][tiles][B] (<= 1 MiB for the
// ResNet shapes: it stays in L2), then per pair of output blocks runs the 36 GEMMs as register
// tiles of up to 14 (zmm) or 6 (ymm) tiles x 2 output blocks, one broadcast of V per 2 FMAs as in
// the direct tiles, into M [36][2][tiles][B], and transforms M into the output.
//
// Accuracy: the transforms scale by up to 8 (A), 5 (B) and 1/24 (G) around the f32 GEMM, so an
// output's rounding error is a few times the direct conv's: measured up to 2e-6 of sum |x||w|
// over its taps (+ |bias| + |residual|), bound 1e-5 tested (tests/unit/test_conv_winograd.cc:
// planes 3..56 with partial edge tiles, 16..512 channels, batches 1-3, every epilogue). ResNet-50
// logits moved by 3e-7 of their largest (the e2e bound is 1e-4). Results do not depend on the
// runner.
// What a caller may rely on: x, u, bias, residual, y contiguous; y must not overlap an input.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

constexpr int64_t kWinogradPoints = 36;  // 6x6 transformed positions per tile

struct WinogradConvShape {
  int64_t n = 1;
  int64_t in_blocks = 1;   // ceil(c / block)
  int64_t h = 1, w = 1;    // input plane
  int64_t out_blocks = 1;  // ceil(o / block)
  int64_t block = 16;      // 16 (AVX-512) or 8 (AVX2)
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  int64_t out_h() const { return h + pad_t + pad_b - 2; }
  int64_t out_w() const { return w + pad_l + pad_r - 2; }
};

// Whether conv2d_winograd runs for this block here: 16 on isa.h level avx512 or up, 8 on a CPU
// with AVX2 and FMA.
bool winograd_available(int64_t block);

// Floats of the transformed weights of an o x c filter bank.
int64_t winograd_weight_floats(int64_t o, int64_t c, int64_t block);

// w: [o, c, 3, 3] (conv2d's weight) -> u: [out_blocks, 36, in_blocks, block (input lane),
// block (output lane)], zero for padded channels; computed in double, rounded once.
void winograd_transform_weights(int64_t o, int64_t c, int64_t block, const float* w, float* u);

// x: [n, in_blocks, h, w, block]; u: winograd_transform_weights' layout;
// bias: [out_blocks * block] or null; residual: y's layout or null;
// y: [n, out_blocks, out_h, out_w, block].
// y = act(conv3x3(x, w) + bias + residual) (sigmoid applied after the store, as conv2d_nchwc).
// Requires winograd_available(s.block) (else it returns without writing y).
void conv2d_winograd(const WinogradConvShape& s, const float* x, const float* u,
                     const float* bias, const float* residual, const ConvEpilogue& ep, float* y,
                     TaskRunner& runner);

}  // namespace sampan::cpu
