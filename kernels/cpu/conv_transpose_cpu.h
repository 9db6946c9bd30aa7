// Transposed 2-D convolution (ONNX ConvTranspose, PyTorch ConvTranspose2d) on the CPU, NCHW f32.
// Each input pixel scatters its channels through the kernel into the output:
//   y[n, g·O/G + o, iy·s_h - pad_t + ky·d_h, ix·s_w - pad_l + kx·d_w]
//     += sum over c < C/G of x[n, g·C/G + c, iy, ix] · w[g·C/G + c, o, ky, kx]
// then + bias[o]. Output size Ho = s_h·(H - 1) + out_pad_h + d_h·(kh - 1) + 1 - pad_t - pad_b
// (likewise Wo); positions the scatter misses hold just the bias.
//
// Done as one GEMM per image and group on the fast GEMM (gemm_cpu.h):
// cols [O/G·kh·kw, H·W] = wᵀ [O/G·kh·kw, C/G] · x [C/G, H·W], then cols scattered into y
// row by row (col2im). Accuracy: f32 sums of C/G products per column element, then at most
// kh·kw additions per output element — f32 summation error only.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

struct ConvTransposeShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input [N, C, H, W]
  int64_t o = 0;                       // output channels (all groups)
  int64_t kh = 0, kw = 0;
  int64_t group = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t out_pad_h = 0, out_pad_w = 0;

  int64_t out_h() const {
    return stride_h * (h - 1) + out_pad_h + dil_h * (kh - 1) + 1 - pad_t - pad_b;
  }
  int64_t out_w() const {
    return stride_w * (w - 1) + out_pad_w + dil_w * (kw - 1) + 1 - pad_l - pad_r;
  }
};

// x: [N, C, H, W]; w: [C, O/group, kh, kw]; bias: [O] or null; y: [N, O, out_h, out_w].
// All contiguous f32; y must not overlap the inputs. Requires out_h, out_w >= 1.
void conv_transpose2d(const ConvTransposeShape& s, const float* x, const float* w,
                      const float* bias, float* y, TaskRunner& runner);

}  // namespace sampan::cpu
