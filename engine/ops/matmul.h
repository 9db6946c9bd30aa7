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
  // precision "bf16" (set by convert_precision_bf16 on a 2-D constant b without trans_b): b is
  // bf16 [k, n], the product runs on bf16-rounded inputs with f32 sums (cpu::matmul_bf16).
  bool bf16 = false;
};

// Reads "trans_b" (default 0), "alpha" (default 1), "activation" (none, relu, gelu, gelu_tanh;
// default none), "precision" (f32, bf16; default f32).
MatmulAttrs parse_matmul_attrs(const graph::Node& node);

}  // namespace sampan::ops
