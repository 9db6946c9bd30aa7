// The rope op's parsed attributes (the op itself: rope.cc; its CUDA kernel: rope_cuda.cc).
// Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include <cstdint>

#include "engine/ops/op_registry.h"

namespace sampan::ops {

struct RopeAttrs final : OpAttrs {
  int64_t n_heads = 0;   // positive
  int64_t head_dim = 0;  // positive and even
  float attn_factor = 1.0f;
};

}  // namespace sampan::ops
