// The hadamard op's parsed attributes (the op itself: hadamard.cc; its CUDA kernel:
// hadamard_cuda.cc). Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include <cstdint>

#include "engine/ops/op_registry.h"

namespace sampan::ops {

struct HadamardAttrs final : OpAttrs {
  int64_t block = 0;  // a power of two (that it divides the row width is a shape check)
};

}  // namespace sampan::ops
