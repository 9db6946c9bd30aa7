// Numerically stable softmax on the CPU: exp(x - max) / sum, along one axis.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// x, y: contiguous [outer, n, inner]; softmax along n for every (outer, inner). y may equal x.
// inner == 1 (the last axis) is the fast path: each row in three vector passes (max, exp and
// sum, scale). exp is the kernels' vector exp (~1 ulp); a row whose max is -inf or NaN gives
// NaN, as the formula does.
void softmax(int64_t outer, int64_t n, int64_t inner, const float* x, float* y,
             TaskRunner& runner);

}  // namespace sampan::cpu
