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
// The first form: cross_entropy's inputs (logits 0, targets 1); the second: `targets` [N] i32
// against a vocabulary of `vocab` (linear_cross_entropy).
void check_targets(const KernelContext& ctx, int32_t ignore);
void check_targets(const KernelContext& ctx, const Tensor& targets, int64_t vocab, int32_t ignore);

}  // namespace sampan::ops
