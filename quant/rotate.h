// Load-time weight math of the QuaRot-style rotation (engine/models/llama_rotate.h), on plain
// host buffers: the conversion of stored weights to f32 and the block-diagonal normalised
// Walsh-Hadamard applied along the rows or down the columns of a matrix, optionally after a
// per-channel scale (±1 signs, folded norm weights). Work is spread over the runner; no dense
// rotation matrix is ever built.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::quant {

// dst [n] f32 = src [n] of dtype (kF32, kF16 or kBF16).
void convert_to_f32(DType dtype, const void* src, float* dst, int64_t n, cpu::TaskRunner& runner);

// m: [rows, n] contiguous. Each row is multiplied by col_scale [n] (may be null) and then
// transformed by the block-diagonal Walsh-Hadamard of `block` (a power of two dividing n):
// m becomes m·diag(s)·Hb.
void hadamard_rows_scaled(float* m, int64_t rows, int64_t n, const float* col_scale,
                          int64_t block, cpu::TaskRunner& runner);

// m: [rows, cols] contiguous. Every column is multiplied by row_scale [rows] (may be null) and
// then transformed: m becomes Hb·diag(s)·m (block a power of two dividing rows).
void hadamard_columns_scaled(float* m, int64_t rows, int64_t cols, const float* row_scale,
                             int64_t block, cpu::TaskRunner& runner);

}  // namespace sampan::quant
