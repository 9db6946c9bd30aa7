// The parsed attributes of transpose (transpose.cc and any backend launcher of it). Parsed once
// per node when the executor plans (op_registry.h).
#pragma once

#include <vector>

#include "engine/ops/op_registry.h"

namespace sampan::ops {

struct TransposeAttrs final : OpAttrs {
  // Output dim d is input dim perm[d]; empty: reverse the dims (ONNX's default). Checked
  // against the input's rank at inference, where the rank is known.
  std::vector<int64_t> perm;
};

// Reads the optional "perm".
TransposeAttrs parse_transpose_attrs(const graph::Node& node);

// The permutation for an input of `rank` dims: perm itself after checking it is one, or the
// reversal. "node 'n' (transpose): perm [0, 0, 1] is not a permutation of 3 dims".
std::vector<int> transpose_perm(const graph::Node& node, const TransposeAttrs& attrs, int rank);

}  // namespace sampan::ops
