// 2-D max and average pooling on the CPU, f32, NCHW (ONNX MaxPool / AveragePool /
// GlobalMaxPool / GlobalAveragePool semantics; the output size, ceil_mode included, is the
// caller's: pool2d.cc).
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

enum class PoolKind { kMax, kAvg };

struct PoolShape {
  PoolKind kind = PoolKind::kMax;
  int64_t n = 1, c = 1, h = 1, w = 1;  // input [n, c, h, w]
  int64_t ho = 1, wo = 1;              // output [n, c, ho, wo]
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  int64_t dil_h = 1, dil_w = 1;
  // Average only: divide by the taps inside the padded input (the window clipped to
  // [-pad, size + pad)) instead of by the taps inside the input.
  bool count_include_pad = false;
};

// x: [n, c, h, w]; y: [n, c, ho, wo]. Window (oy, ox) covers input rows
// oy * stride_h - pad_t + ky * dil_h for ky < kh (likewise columns). Max ignores taps outside
// the input; a window with no tap inside the input (only possible when pads >= the kernel)
// gives -inf for max and 0 for average.
void pool2d(const PoolShape& s, const float* x, float* y, TaskRunner& runner);

}  // namespace sampan::cpu
