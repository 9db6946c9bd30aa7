// Numpy broadcasting (ONNX "multidirectional") for the element-wise ops: binary, where, expand.
// Shapes align at the right; a dimension of 1 stretches to the other's size.
#pragma once

#include <vector>

#include "engine/core/tensor.h"
#include "engine/graph/graph.h"

namespace sampan::ops {

// The broadcast of a and b, or Error(kInvalidArgument) naming the node:
// "node 'N' (op): shapes [2, 3] and [4] do not broadcast".
Shape broadcast_shapes(const graph::Node& node, const Shape& a, const Shape& b);

// Strides (elements) that read a tensor of `shape` and `strides` as if it had shape `out`
// (its broadcast): rank(out) entries, 0 where a dimension is stretched or missing.
// `shape` must broadcast to `out`.
Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& out);

}  // namespace sampan::ops
