// The parsed attributes and shared checks of cross_entropy and cross_entropy_grad.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/ops/op_registry.h"

namespace sampan::ops {

struct CrossEntropyAttrs final : OpAttrs {
  int32_t ignore_index = -100;
};

CrossEntropyAttrs parse_cross_entropy_attrs(const graph::Node& node);
// Inputs 0 (logits [N, V] f32) and 1 (targets [N] i32).
void check_cross_entropy_inputs(const graph::Node& node, const std::vector<TensorDesc>& in);
// Every target of a launch is the ignore index or in [0, V); one line naming the row otherwise.
void check_targets(const KernelContext& ctx, int32_t ignore);

}  // namespace sampan::ops
