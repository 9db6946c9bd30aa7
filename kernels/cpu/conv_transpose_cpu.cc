#include "kernels/cpu/conv_transpose_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"

namespace sampan::cpu {

void conv_transpose2d(const ConvTransposeShape& s, const float* x, const float* w,
                      const float* bias, float* y, TaskRunner& runner) {
  const int64_t cg = s.c / s.group;  // input channels per group
  const int64_t og = s.o / s.group;  // output channels per group
  const int64_t hw = s.h * s.w;
  const int64_t ho = s.out_h(), wo = s.out_w();
  const int64_t rows = og * s.kh * s.kw;  // GEMM rows: (o, ky, kx)
  // wᵀ of one group: [rows, cg]; x of one image and group, transposed: [hw, cg] (the GEMM's
  // weight operand is row-major [n, k]).
  std::vector<float> wt(static_cast<size_t>(rows * cg));
  std::vector<float> xt(static_cast<size_t>(hw * cg));
  std::vector<float> cols(static_cast<size_t>(rows * hw));
  for (int64_t n = 0; n < s.n; ++n) {
    float* yn = y + n * s.o * ho * wo;
    // Bias first (or zero): the scatter accumulates on top.
    runner.run(s.o, [&](int64_t o) {
      std::fill(yn + o * ho * wo, yn + (o + 1) * ho * wo, bias ? bias[o] : 0.0f);
    });
    for (int64_t g = 0; g < s.group; ++g) {
      if (n == 0 || s.group > 1) {
        // w[g·cg + c, o, ky, kx] -> wt[(o·kh + ky)·kw + kx, c]
        const float* wg = w + g * cg * rows;
        for (int64_t c = 0; c < cg; ++c) {
          for (int64_t r = 0; r < rows; ++r) wt[static_cast<size_t>(r * cg + c)] = wg[c * rows + r];
        }
      }
      const float* xg = x + (n * s.c + g * cg) * hw;
      for (int64_t c = 0; c < cg; ++c) {
        for (int64_t p = 0; p < hw; ++p) xt[static_cast<size_t>(p * cg + c)] = xg[c * hw + p];
      }
      GemmWeights gw;
      gw.dtype = DType::kF32;
      gw.k = cg;
      gw.n_blocks = 1;
      gw.data[0] = xt.data();
      gw.rows[0] = hw;
      gemm(rows, wt.data(), cg, gw, GemmEpilogue::kStore, cols.data(), hw, runner);
      // col2im: output channel o of the group gathers its kh·kw rows of cols.
      float* yg = yn + g * og * ho * wo;
      runner.run(og, [&](int64_t o) {
        float* yo = yg + o * ho * wo;
        for (int64_t ky = 0; ky < s.kh; ++ky) {
          for (int64_t kx = 0; kx < s.kw; ++kx) {
            const float* src = cols.data() + ((o * s.kh + ky) * s.kw + kx) * hw;
            const int64_t dx = kx * s.dil_w - s.pad_l;
            // Input columns whose output column lands inside [0, wo).
            int64_t ix0 = 0;
            while (ix0 < s.w && ix0 * s.stride_w + dx < 0) ++ix0;
            int64_t ix1 = s.w;
            while (ix1 > ix0 && (ix1 - 1) * s.stride_w + dx >= wo) --ix1;
            for (int64_t iy = 0; iy < s.h; ++iy) {
              const int64_t oy = iy * s.stride_h - s.pad_t + ky * s.dil_h;
              if (oy < 0 || oy >= ho) continue;
              float* row = yo + oy * wo;
              const float* in = src + iy * s.w;
              for (int64_t ix = ix0; ix < ix1; ++ix) row[ix * s.stride_w + dx] += in[ix];
            }
          }
        }
      });
    }
  }
}

}  // namespace sampan::cpu
