// The AVX-512 form of bias_activation_rows (binary_cpu.h), which calls it where isa.h's
// has_avx512() holds: 16 lanes of the same operations (avx512_math.h), so the same bits.
#pragma once

#include <cstdint>

#include "kernels/cpu/binary_cpu.h"

namespace sampan::cpu::detail {

// y [rows, n] (row stride ldy) = act(alpha * y + bias), bias [n] or null.
void bias_activation_rows_avx512(int64_t rows, int64_t n, float* y, int64_t ldy, float alpha,
                                 const float* bias, Activation act);

}  // namespace sampan::cpu::detail
