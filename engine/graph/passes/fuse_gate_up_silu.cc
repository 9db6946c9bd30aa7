#include "engine/graph/passes/passes.h"

namespace sampan::graph::passes {
namespace {

// A linear node with one weight block and the plain epilogue, whose only reader is `reader`.
bool plain_linear_read_only_by(const Graph& g, ValueId v, NodeId reader) {
  const Value& val = g.value(v);
  if (val.kind != ValueKind::kIntermediate || g.is_output(v)) return false;
  const Node& n = g.node(val.producer);
  if (n.dead || n.op != "linear" || n.attrs.get_int("n_blocks", 1) != 1 ||
      n.attrs.get_string("epilogue", "store") != "store") {
    return false;
  }
  const auto readers = g.consumers(v);
  return readers.size() == 1 && readers[0] == reader;
}

// Input slot s (1 weight, 2 bias, 3 scales, 4 zeros) of a one-block linear, kNoValue if absent.
ValueId slot_of(const Node& n, size_t s) { return s < n.inputs.size() ? n.inputs[s] : kNoValue; }

// Two weight blocks can share one GEMM only in the same format: same weight type and, for
// quantized weights, the same group size, scale type and ggml block type (engine/ops/linear.cc).
bool same_format(const Graph& g, const Node& a, const Node& b) {
  if (g.value(a.inputs[1]).dtype != g.value(b.inputs[1]).dtype) return false;
  if (a.attrs.get_int("group_size", 0) != b.attrs.get_int("group_size", 0)) return false;
  // GGUF block weights (u8 rows): only blocks of one ggml type share a GEMM (Q4_K_M files mix
  // Q4_K and Q6_K projections).
  if (a.attrs.get_int("ggml_type", -1) != b.attrs.get_int("ggml_type", -1)) return false;
  const ValueId sa = slot_of(a, 3), sb = slot_of(b, 3);
  if ((sa == kNoValue) != (sb == kNoValue)) return false;
  return sa == kNoValue || g.value(sa).dtype == g.value(sb).dtype;
}

}  // namespace

int fuse_gate_up_silu(Graph& graph) {
  int fused = 0;
  for (NodeId s = 0; s < static_cast<NodeId>(graph.nodes().size()); ++s) {
    const Node& silu = graph.node(s);
    if (silu.dead || silu.op != "silu_mul") continue;
    const ValueId g = silu.inputs[0], u = silu.inputs[1];
    if (!plain_linear_read_only_by(graph, g, s) || !plain_linear_read_only_by(graph, u, s)) continue;
    const NodeId gi = graph.value(g).producer, ui = graph.value(u).producer;
    const Node& up = graph.node(ui);
    Node& gate = graph.mutable_node(gi);
    if (gate.inputs[0] != up.inputs[0] || !same_format(graph, gate, up)) continue;
    // Two-block slots: x, w_gate, w_up, then bias, scales and zeros pairs; trailing all-absent
    // pairs are left out.
    std::vector<ValueId> inputs = {gate.inputs[0], gate.inputs[1], up.inputs[1]};
    for (size_t slot = 2; slot <= 4; ++slot) {
      inputs.push_back(slot_of(gate, slot));
      inputs.push_back(slot_of(up, slot));
    }
    while (inputs.back() == kNoValue && inputs[inputs.size() - 2] == kNoValue) {
      inputs.resize(inputs.size() - 2);
    }
    // The fused node sits where the gate projection was; both weights and x exist by then.
    gate.inputs = std::move(inputs);
    gate.attrs.set("n_blocks", int64_t{2});
    gate.attrs.set("epilogue", std::string("silu_mul"));
    const ValueId out = silu.outputs[0];
    gate.outputs = {out};
    graph.mutable_value(out).producer = gi;
    graph.mutable_node(ui).dead = true;
    graph.mutable_node(s).dead = true;
    ++fused;
  }
  return fused;
}

}  // namespace sampan::graph::passes
