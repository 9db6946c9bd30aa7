// 2-D convolution on the CPU, f32, NCHW in and out (the graph's layout; nothing is converted to
// another layout in memory except the per-thread packed input tiles below). A bf16 variant of
// the GEMM path (conv2d_bf16, matmul_bf16) is declared further down.
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

#include "kernels/cpu/binary_cpu.h"
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

// bf16 precision (the GEMM path only): the GEMM's inputs are rounded to bf16 (nearest even),
// products accumulate in f32, bias, residual and activation are applied in f32 as above.
//  - conv2d_bf16: w already bf16, [o, c / group, kh, kw] row-major (rounded once, at load); the
//    input tile is rounded while it is packed. Convs whose groups read one input channel each
//    (depthwise) have no GEMM: call conv2d with f32 weights for those (w is not accepted here).
//  - matmul_bf16: y [m, n] = a [m, k] · b [k, n], b bf16 (rounded once, at load), a rounded
//    here; the 1x1-conv form of conv2d, with b as the image and a as the filter.
// With AMX-BF16 the tile runs tdpbf16ps (a 32 x 32 block of outputs per call, 32 k steps per
// instruction); with AVX512-BF16 and no AMX (or SAMPAN_CPU_ISA=avx512_bf16, or
// set_conv_kernel(kAvx512)) vdpbf16ps (two k steps per instruction); without it (or after
// set_conv_kernel(kAvx2)) the same rounded inputs run through a portable loop of f32
// multiply-adds: the same rounding, f32 sums in a different order, several times slower.
// Accuracy: every product of two bf16 numbers is exact in f32, so against the exact product of
// the rounded inputs the error is f32 summation only (~k · 2^-24 · sum |x||w| at worst); against
// the unrounded f32 inputs each product is off by up to ~2^-8 relative, ~2^-8 · sqrt(k) · rms
// product in a sum of random signs.
// x: [n, c, h, w] f32; w: [o, c / group, kh, kw] bf16 bits; bias: [o] or null;
// residual: [n, o, ho, wo] or null; y: [n, o, ho, wo].
void conv2d_bf16(const ConvShape& s, const float* x, const uint16_t* w, const float* bias,
                 const float* residual, const ConvEpilogue& ep, float* y, TaskRunner& runner);
// matmul_bf16's optional epilogue: y = act(alpha * y + bias[column]), applied by the GEMM's
// tasks to each block of outputs they finish, while it is in cache; the values of
// bias_activation (binary_cpu.h) on the finished product, bit for bit.
struct MatmulEpilogue {
  float alpha = 1.0f;
  const float* bias = nullptr;  // [n] or null
  Activation act = Activation::kNone;
  bool any() const { return alpha != 1.0f || bias != nullptr || act != Activation::kNone; }
};
// a: [m, k] f32; b: [k, n] bf16 bits; y: [m, n].
void matmul_bf16(int64_t m, int64_t k, int64_t n, const float* a, const uint16_t* b, float* y,
                 TaskRunner& runner, const MatmulEpilogue& ep = {});
// The same with a already in bf16: a: [m, k] bf16 bits, rows lda (>= k) apart.
void matmul_bf16_a16(int64_t m, int64_t k, int64_t n, const uint16_t* a, int64_t lda,
                     const uint16_t* b, float* y, TaskRunner& runner,
                     const MatmulEpilogue& ep = {});
// And with row strides for b ([k, n], rows ldb >= n apart) and y ([m, n], rows ldy >= n apart;
// columns past n untouched).
void matmul_bf16_a16(int64_t m, int64_t k, int64_t n, const uint16_t* a, int64_t lda,
                     const uint16_t* b, int64_t ldb, float* y, int64_t ldy, TaskRunner& runner,
                     const MatmulEpilogue& ep = {});
// Whether the bf16 path has its vdpbf16ps tile on this CPU (else the portable loop runs).
bool conv_bf16_native();

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

// The bf16 tile: as MicroKernelFn, with a bf16 ([m] rows lda apart, kc may be odd: its last
// element pairs with 0) and bp packed in pairs along k, [ceil(kc / 2)][nr][2] bf16 (64-byte
// aligned; an odd kc's last pair row holds (b, 0)).
using MicroKernelBf16Fn = void (*)(int m, int64_t kc, const uint16_t* a, int64_t lda,
                                   const uint16_t* bp, float* c, int64_t ldc, bool accumulate,
                                   bool last, const float* bias, const float* res,
                                   const ConvEpilogue* ep);
struct Bf16Kernels {
  int mr = 0;
  int nr = 0;
  MicroKernelBf16Fn fn = nullptr;
  // src: [kc][nr] f32 (64-byte aligned) -> dst: [ceil(kc / 2)][nr][2] bf16, rounded.
  void (*pack_f32)(const float* src, int64_t kc, uint16_t* dst) = nullptr;
  // src: kc rows of bf16, ld apart, ncols (<= nr) read per row -> dst as above (zeros past ncols).
  void (*pack_bf16)(const uint16_t* src, int64_t ld, int64_t kc, int64_t ncols,
                    uint16_t* dst) = nullptr;
  // src: kc rows of f32, ld apart, ncols (<= nr) read per row -> dst as above, rounded (zeros
  // past ncols): a pointwise conv's rows of the image, packed in one pass.
  void (*pack_f32_rows)(const float* src, int64_t ld, int64_t kc, int64_t ncols,
                        uint16_t* dst) = nullptr;
  // Called by the driver on the worker thread before its task's first tile call and after its
  // last (AMX: tile configuration and release); null when the tile needs neither.
  void (*begin)() = nullptr;
  void (*end)() = nullptr;
};
// The largest mr * nr of any bf16 tile (the driver's edge buffers).
inline constexpr int kBf16TileMaxElems = 32 * 32;
Bf16Kernels bf16_kernels_avx512();
// 32 x 32 on AMX tiles (conv_bf16_amx.cc), the vdpbf16ps packers' panels as B; only on CPUs
// where has_amx().
Bf16Kernels bf16_kernels_amx();

}  // namespace conv_detail
}  // namespace sampan::cpu
