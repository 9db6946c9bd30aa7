// The binary op's parsed attributes (binary.cc; CPU kernel kernels/cpu/binary_cpu.h).
#pragma once

#include "engine/ops/op_registry.h"
#include "kernels/cpu/binary_cpu.h"

namespace sampan::ops {

using cpu::BinaryKind;

struct BinaryAttrs final : OpAttrs {
  BinaryKind kind = BinaryKind::kAdd;
};

// Reads the required "kind" (add, sub, mul, div, pow, max, min, mod, equal, less, less_equal,
// greater, greater_equal, and, or, xor).
BinaryAttrs parse_binary_attrs(const graph::Node& node);

}  // namespace sampan::ops
