// conv2d_winograd (conv2d_winograd.cc; CPU kernel kernels/cpu/conv_winograd_cpu.h): the blocked
// 3x3 stride-1 conv by Winograd F(4x4, 3x3), as the layout pass (engine/graph/passes/
// layout_passes.h) sees it.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"

namespace sampan::ops {

// Whether conv2d_winograd runs for blocked tensors of this block on this machine's CPU.
bool winograd_runs(int64_t block);

// conv2d's weight w [O, C, 3, 3] (f32) -> conv2d_winograd's transformed weight
// [O/B, 36, C/B, B, B] (channels padded with zeros to the block B).
Tensor winograd_weight(const Tensor& w, int64_t block);

}  // namespace sampan::ops
