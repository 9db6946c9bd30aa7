// Fast Walsh-Hadamard transform over blocks of a row (QuaRot-style online rotations).
//
// H_1 = [1], H_2m = [[H_m, H_m], [H_m, -H_m]] (Sylvester order); the transform of a block b of
// length B is H_B b / sqrt(B), which is orthogonal and its own inverse. A width that is not a
// power of two is handled block-diagonally: B is a power of two dividing n and each of the n / B
// consecutive blocks is transformed on its own.
#pragma once

#include <cstdint>

#include "kernels/common/hadamard_block.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// The largest power of two dividing n, capped at max_block (kernels/common/hadamard_block.h).
using sampan::hadamard_block_for;

// In place. x: [rows, n] f32, row stride ldx >= n; block: a power of two dividing n.
// O(n log B) per row; rows (and, for few long rows, nothing else) are split over the runner.
void hadamard_rows(int64_t rows, int64_t n, int64_t block, float* x, int64_t ldx,
                   TaskRunner& runner);

}  // namespace sampan::cpu
