// Strided copies of any element type: the data-movement kernel behind transpose, slice, concat,
// expand and the reshape of a non-contiguous tensor. Elements are moved as opaque 1/2/4/8-byte
// words, so one kernel serves every whole-byte dtype.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// y[i] = x[i] for every index i of `shape` (rank dims; rank 0 copies one element), where element
// i of x lives at x + sum(i_d * x_strides[d]) and of y at y + sum(i_d * y_strides[d]), strides
// in elements of `elem_bytes` (1, 2, 4 or 8) bytes. x strides may be zero (broadcast) or
// negative (a reversed slice); y must not overlap x, and no two indices may write the same y
// element. Fast paths, taken after dropping size-1 dims and merging dims contiguous in both:
// contiguous rows in both (memcpy per row), and a 2-D tiled transpose when one dim is
// contiguous in x and the innermost dim is contiguous in y (or the reverse), e.g. the
// [B, S, H, D] -> [B, H, D, S] permutation of attention. Multithreaded over `runner`.
void copy_strided(int rank, const int64_t* shape, const void* x, const int64_t* x_strides,
                  void* y, const int64_t* y_strides, int elem_bytes, TaskRunner& runner);

// y = x transposed by `perm`: x is contiguous with shape x_shape [rank]; y is contiguous with
// shape x_shape[perm[0]], ..., x_shape[perm[rank - 1]] and dim d of y is dim perm[d] of x.
void transpose(int rank, const int64_t* x_shape, const int* perm, const void* x, void* y,
               int elem_bytes, TaskRunner& runner);

}  // namespace sampan::cpu
