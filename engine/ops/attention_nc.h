// The attention_nc op's parsed attributes (the op: attention_nc.cc; its CPU kernel:
// kernels/cpu/attention_nc_cpu.h). Parsed once per node when the executor plans.
#pragma once

#include <cmath>

#include "engine/ops/op_registry.h"

namespace sampan::ops {

struct AttentionNcAttrs final : OpAttrs {
  int64_t n_heads = 1;  // > 0; divides the last dim of q, k and v
  // Multiplies q·k before the mask is added. NaN when the node has none: 1/sqrt(head_dim).
  float scale = NAN;
};

// Reads "n_heads" (required, > 0) and "scale" (optional, finite).
AttentionNcAttrs parse_attention_nc_attrs(const graph::Node& node);

}  // namespace sampan::ops
