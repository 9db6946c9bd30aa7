// The unary op's parsed attributes (the op: unary.cc; its f32 CPU kernel:
// kernels/cpu/unary_cpu.h). Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include <string>

#include "engine/ops/op_registry.h"
#include "kernels/cpu/unary_cpu.h"

namespace sampan::ops {

// The kinds beyond the f32 ones: "not" takes bool; neg and abs also take i32/i64.
enum class UnaryDomain { kFloat, kNot };

struct UnaryAttrs final : OpAttrs {
  std::string kind;
  UnaryDomain domain = UnaryDomain::kFloat;
  cpu::UnaryParams params;  // alpha, beta, min, max with ONNX's defaults for the kind
};

// Reads kind (required), alpha, beta, min, max (optional).
UnaryAttrs parse_unary_attrs(const graph::Node& node);

// The f32 kind of a name ("relu", "gelu_tanh", ...); false for an unknown one (and for "not").
bool unary_kind_from_name(const std::string& name, cpu::UnaryKind* out);

}  // namespace sampan::ops
