// The parsed attributes of rms_norm and add_rms_norm (rms_norm.cc, add_rms_norm.cc and their
// CUDA kernels). Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include "engine/ops/op_registry.h"

namespace sampan::ops {

struct RmsNormAttrs final : OpAttrs {
  float eps = 0.0f;
};

// Reads the required "eps".
RmsNormAttrs parse_rms_norm_attrs(const graph::Node& node);

}  // namespace sampan::ops
