// Small matchers the pattern passes share (conv, matmul and encoder passes).
#pragma once

#include <cmath>

#include "engine/graph/graph.h"

namespace sampan::graph::passes {

// A live node of op `op` (and, for ops with a "kind" attribute, of that kind).
inline bool is_op(const Node& n, const char* op, const char* kind = nullptr) {
  if (n.dead || n.op != op) return false;
  return !kind || n.attrs.get_string("kind", "") == kind;
}

// The one live node reading v, when v is not a graph output; -1 otherwise (a fusion that
// swallows v must be its only reader).
inline NodeId only_consumer(const Graph& g, ValueId v) {
  if (g.is_output(v)) return -1;
  const std::vector<NodeId> c = g.consumers(v);
  return c.size() == 1 ? c[0] : -1;
}

// The value of a one-element f32 constant, or NaN (no comparison with NaN holds, so a match on
// the value fails for anything else).
inline double scalar_constant(const Graph& g, ValueId v) {
  if (v == kNoValue) return NAN;
  const Value& val = g.value(v);
  if (val.kind != ValueKind::kConstant || val.constant.dtype() != DType::kF32 ||
      val.constant.numel() != 1) {
    return NAN;
  }
  return static_cast<double>(val.constant.contiguous().data<float>()[0]);
}

}  // namespace sampan::graph::passes
