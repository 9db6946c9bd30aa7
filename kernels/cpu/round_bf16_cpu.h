// Rounding f32 values to the nearest bf16 (ties to even), kept in f32: how a training graph
// in bf16 precision gives its GEMMs bf16 operands while every sum stays f32.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// x, y: [rows, cols] with row strides ldx, ldy (y may equal x with equal strides). Bit-exact with
// bf16_to_f32(f32_to_bf16(x)) of kernels/common/half.h, NaN preserved.
void round_bf16(int64_t rows, int64_t cols, const float* x, int64_t ldx, float* y, int64_t ldy,
                TaskRunner& runner);

}  // namespace sampan::cpu
