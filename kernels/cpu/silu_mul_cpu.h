// SwiGLU activation: y = silu(gate) * up, with silu(g) = g / (1 + exp(-g)).
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// gate, up, y: [rows, n] each with its own row stride. y may alias gate or up.
void silu_mul(int64_t rows, int64_t n, const float* gate, int64_t ldg, const float* up,
              int64_t ldu, float* y, int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu
