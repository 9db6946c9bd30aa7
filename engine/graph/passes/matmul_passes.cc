// Passes for imported transformer encoders (BERT): GELU written out as erf arithmetic becomes one
// unary node; bias adds and activations ride in the matmul's epilogue.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "engine/graph/passes/matmul_passes.h"
#include "engine/graph/passes/pattern.h"
#include "engine/ops/matmul_packed.h"

namespace sampan::graph::passes {
namespace {

bool near(double a, double b) { return std::abs(a - b) <= 1e-6 * std::abs(b); }

// The operand of binary node n that is not `v` (or -1 when neither is).
ValueId other(const Node& n, ValueId v) {
  if (n.inputs.size() != 2) return kNoValue;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return kNoValue;
}

}  // namespace

int fuse_gelu(Graph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    // erf(x / √2) or erf(x · (1/√2))
    const Node& scale = g.nodes()[i];
    const bool div = is_op(scale, "binary", "div");
    if (!div && !is_op(scale, "binary", "mul")) continue;
    const ValueId x = scale.inputs[0];
    const double c = scalar_constant(g, scale.inputs[1]);
    if (!(div ? near(c, std::sqrt(2.0)) : near(c, std::sqrt(0.5)))) continue;
    const NodeId erf = only_consumer(g, scale.outputs[0]);
    if (erf < 0 || !is_op(g.node(erf), "unary", "erf")) continue;
    const NodeId plus = only_consumer(g, g.node(erf).outputs[0]);
    if (plus < 0 || !is_op(g.node(plus), "binary", "add") || !near(scalar_constant(g, other(g.node(plus), g.node(erf).outputs[0])), 1.0)) continue;
    // x · (1 + erf) · 0.5, in either association.
    const NodeId m1 = only_consumer(g, g.node(plus).outputs[0]);
    if (m1 < 0 || !is_op(g.node(m1), "binary", "mul")) continue;
    const ValueId m1_other = other(g.node(m1), g.node(plus).outputs[0]);
    NodeId last = -1;
    if (m1_other == x) {
      const NodeId m2 = only_consumer(g, g.node(m1).outputs[0]);
      if (m2 < 0 || !is_op(g.node(m2), "binary", "mul") || !near(scalar_constant(g, other(g.node(m2), g.node(m1).outputs[0])), 0.5)) continue;
      last = m2;
    } else if (m1_other != kNoValue && g.value(m1_other).kind == ValueKind::kIntermediate) {
      const Node& half = g.node(g.value(m1_other).producer);  // (x · 0.5) · (1 + erf)
      if (!is_op(half, "binary", "mul") || other(half, x) == kNoValue || !near(scalar_constant(g, other(half, x)), 0.5)) continue;
      if (only_consumer(g, m1_other) != m1) continue;
      g.mutable_node(g.value(m1_other).producer).dead = true;
      last = m1;
    } else {
      continue;
    }
    // The last node becomes gelu(x); the others die.
    Node& out = g.mutable_node(last);
    out.op = "unary";
    out.inputs = {x};
    out.attrs = Attributes{{"kind", std::string("gelu")}};
    g.mutable_nodes()[i].dead = true;
    g.mutable_node(erf).dead = true;
    g.mutable_node(plus).dead = true;
    if (last != m1) g.mutable_node(m1).dead = true;
    ++rewrites;
  }
  return rewrites;
}

int fuse_matmul_bias(Graph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (!is_op(n, "matmul") || n.inputs.size() != 2 || n.attrs.get_string("activation", "none") != "none") continue;
    const Value& b = g.value(n.inputs[1]);
    if (b.kind != ValueKind::kConstant || b.constant.rank() != 2) continue;
    const int64_t cols = n.attrs.get_int("trans_b", 0) ? b.constant.dim(0) : b.constant.dim(1);
    const NodeId add = only_consumer(g, n.outputs[0]);
    if (add < 0 || !is_op(g.node(add), "binary", "add")) continue;
    const ValueId bias = other(g.node(add), n.outputs[0]);
    if (bias == kNoValue || g.value(bias).kind != ValueKind::kConstant) continue;
    const Tensor& bt = g.value(bias).constant;
    if (bt.dtype() != DType::kF32 || bt.rank() != 1 || bt.dim(0) != cols) continue;
    // The add's output is now the matmul's: rewrite the add node into the fused matmul, so
    // that the node keeps its place (and its output value, which later nodes read).
    Node fused = g.nodes()[i];
    fused.inputs.push_back(bias);
    fused.outputs = g.node(add).outputs;
    fused.name = g.node(add).name;
    g.mutable_node(add) = fused;
    g.mutable_nodes()[i].dead = true;
    ++rewrites;
  }
  return rewrites;
}

int fuse_matmul_activation(Graph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (!is_op(n, "matmul") || n.attrs.get_string("activation", "none") != "none") continue;
    const NodeId act = only_consumer(g, n.outputs[0]);
    if (act < 0 || !is_op(g.node(act), "unary")) continue;
    const std::string kind = g.node(act).attrs.get_string("kind", "");
    if (kind != "gelu" && kind != "gelu_tanh" && kind != "relu") continue;
    Node fused = g.nodes()[i];
    fused.attrs.set("activation", kind);
    fused.outputs = g.node(act).outputs;
    fused.name = g.node(act).name;
    g.mutable_node(act) = fused;
    g.mutable_nodes()[i].dead = true;
    ++rewrites;
  }
  return rewrites;
}

int pack_matmul_weights(Graph& g) {
  const char* env = std::getenv("SAMPAN_MATMUL_PACK");
  if (env && std::strcmp(env, "0") == 0) return 0;
  const int nr = ops::matmul_packed_width();
  int rewrites = 0;
  std::map<std::pair<ValueId, bool>, ValueId> packed;  // (b, trans_b) -> its packed copy
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.dead || !is_op(n, "matmul") || n.attrs.get_string("precision", "f32") != "f32") continue;
    const Value& b = g.value(n.inputs[1]);
    if (b.kind != ValueKind::kConstant || b.constant.rank() != 2 ||
        b.constant.dtype() != DType::kF32 || b.constant.numel() == 0) {
      continue;
    }
    const bool trans_b = n.attrs.get_int("trans_b", 0) != 0;
    const int64_t cols = trans_b ? b.constant.dim(0) : b.constant.dim(1);
    const auto key = std::make_pair(n.inputs[1], trans_b);
    auto it = packed.find(key);
    if (it == packed.end()) {
      const Tensor contiguous = b.constant.is_contiguous() ? b.constant : b.constant.contiguous();
      it = packed.emplace(key, g.add_constant(b.name + ".packed",
                                              ops::pack_matmul_weight(contiguous, trans_b, nr)))
               .first;
    }
    Node& m = g.mutable_nodes()[i];
    m.op = "matmul_packed";
    m.inputs[1] = it->second;
    Attributes attrs{{"n", cols}};
    if (m.attrs.has("alpha")) attrs.set("alpha", m.attrs.get_float("alpha", 1.0));
    if (m.attrs.has("activation")) attrs.set("activation", m.attrs.get_string("activation", "none"));
    m.attrs = std::move(attrs);
    ++rewrites;
  }
  return rewrites;
}

}  // namespace sampan::graph::passes
