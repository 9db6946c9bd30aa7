// 2-D convolution on the CPU, f32, NCHW in and out (the graph's layout; nothing is converted to
// another layout in memory except the per-thread packed input tiles below).
//
// y = act(conv(x, w) + bias + residual), with ONNX Conv semantics (strides, asymmetric pads,
// dilations, groups).
//
// How it runs (conv_cpu.cc; micro-kernels in conv_avx2.cc / conv_avx512.cc):
//  - Every conv whose groups read one input channel each (depthwise, any channel multiplier)
//    runs a direct kernel: one output plane per task, rows vectorised over the output width.
//  - Everything else is a GEMM per image and group in the NCHW-natural form
//      Y[O/g, Ho*Wo] = W[O/g, K] · B[K, Ho*Wo],  K = C/g * kh * kw,
//    where B is the im2col matrix. B is never materialised whole: each task packs a tile of it
//    (at most kc rows x nc columns, ~200 KB, kept in a thread-local buffer) straight from the
//    image, so the im2col gather and the GEMM's packing are one pass. The weights are read in
//    place (row-major [O, K]: the micro-kernel broadcasts them), so no per-node weight cache is
//    needed. The output is written once, NCHW, with bias, residual and activation applied in
//    registers on the last k chunk.
//  - Tasks are (image, group, column tile, output-channel chunk), spread over runner.
//
// What a caller may rely on:
//  - x, w, bias, residual, y contiguous; y must not overlap any input (residual included: y
//    holds partial sums over k chunks before the residual is added).
//  - Accuracy: f32 products summed in f32 in k order per chunk (~1e-6 relative to
//    sum |x||w|). The result does not depend on the runner.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

enum class ConvActivation { kNone, kRelu, kClip, kSigmoid, kHardSwish };

struct ConvShape {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input [n, c, h, w]
  int64_t o = 1, kh = 1, kw = 1;       // weight [o, c / group, kh, kw]
  int64_t group = 1;                   // divides c and o
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  int64_t dil_h = 1, dil_w = 1;
  // Output spatial size: (h + pad_t + pad_b - dil_h * (kh - 1) - 1) / stride_h + 1 (>= 1).
  int64_t out_h() const { return (h + pad_t + pad_b - dil_h * (kh - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (w + pad_l + pad_r - dil_w * (kw - 1) - 1) / stride_w + 1; }
};

struct ConvEpilogue {
  ConvActivation act = ConvActivation::kNone;
  float act_min = 0.0f;  // kClip only
  float act_max = 0.0f;
};

// x: [n, c, h, w]; w: [o, c / group, kh, kw]; bias: [o] or null;
// residual: [n, o, ho, wo] or null; y: [n, o, ho, wo].
void conv2d(const ConvShape& s, const float* x, const float* w, const float* bias,
            const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner);

// Which register tile the GEMM path uses. kAuto (the default): the AVX-512 tile when the CPU
// has AVX-512 F/BW/VL/DQ and the instruction-set level (isa.h) is not lowered to avx2 (on a CPU
// whose level is avx2 only for lack of AVX-512 FP16, such as AMD Zen 4, unless
// SAMPAN_CPU_ISA=avx2), else the AVX2 tile. For tests and benchmarks; not to race with running
// convs.
enum class ConvKernelChoice { kAuto, kAvx2, kAvx512 };
void set_conv_kernel(ConvKernelChoice choice);
bool conv_kernel_available(ConvKernelChoice choice);

// Applies the activation to n floats in place (the direct path and the sigmoid epilogue use it).
void conv_activate(const ConvEpilogue& ep, float* v, int64_t n);

namespace conv_detail {

// The register tile of the GEMM path: rows of W (output channels) x columns of B (pixels).
// C[m, kNr] (+)= A[m, kc] · Bp[kc, kNr] for m <= mr, where Bp is packed [kc][nr] (64-byte
// aligned) and A rows are lda apart. accumulate: add to C's contents (a later k chunk), else
// overwrite. last: also add bias[0:m] (may be null) and res (C's layout, may be null), then
// apply the activation (sigmoid excepted: the driver applies it after the store).
// c, res: [m, ldc] with all nr columns writable.
using MicroKernelFn = void (*)(int m, int64_t kc, const float* a, int64_t lda, const float* bp,
                               float* c, int64_t ldc, bool accumulate, bool last,
                               const float* bias, const float* res, const ConvEpilogue* ep);

struct MicroKernel {
  int mr = 0;  // rows (output channels) per tile
  int nr = 0;  // columns (pixels) per tile, a whole number of vectors
  MicroKernelFn fn = nullptr;
};

MicroKernel micro_kernel_avx2();
MicroKernel micro_kernel_avx512();

}  // namespace conv_detail
}  // namespace sampan::cpu
