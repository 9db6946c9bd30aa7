// The matmul op's parsed attributes (matmul.cc).
#pragma once

#include "engine/ops/op_registry.h"
#include "kernels/cpu/binary_cpu.h"

namespace sampan::ops {

using cpu::Activation;

struct MatmulAttrs final : OpAttrs {
  bool trans_b = false;  // b is [n, k] (2-D only)
  float alpha = 1.0f;    // y = act(alpha * a·b + bias)
  Activation activation = Activation::kNone;
};

// Reads "trans_b" (default 0), "alpha" (default 1), "activation" (none, relu, gelu, gelu_tanh;
// default none).
MatmulAttrs parse_matmul_attrs(const graph::Node& node);

}  // namespace sampan::ops
