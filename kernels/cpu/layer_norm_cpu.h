// Layer normalisation over the last `n` elements of each row, on the CPU.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// x: [rows, n] row stride ldx; scale, bias: [n] or null; y: [rows, n] row stride ldy (may equal
// x). y = (x - mean) / sqrt(var + eps) * scale + bias, var the biased (1/n) variance. Two passes
// over each row (mean, then squared deviations, so a large mean costs no precision), summed in
// f32 vector lanes within blocks of 1024 and the blocks in double: rows of any length keep full
// f32 accuracy.
void layer_norm(int64_t rows, int64_t n, const float* x, int64_t ldx, const float* scale,
                const float* bias, float eps, float* y, int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu
