// RMSNorm (y = x / sqrt(mean(x²) + eps) * w), optionally fused with the residual add before it.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// x: [rows, dim] row stride ldx; w: [dim]; y: [rows, dim] row stride ldy. y may equal x.
void rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w, float eps,
              float* y, int64_t ldy, TaskRunner& runner);

// sum = x + residual; y = rms_norm(sum) * w. All [rows, dim] with their own row strides.
// sum may alias x or residual (element-wise in place), y must not alias sum.
void add_rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* residual,
                  int64_t ldr, const float* w, float eps, float* sum, int64_t lds, float* y,
                  int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu
