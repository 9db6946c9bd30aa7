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
    if (gate.inputs[0] != up.inputs[0]) continue;
    const ValueId w_up = up.inputs[1];
    const ValueId b_gate = gate.inputs.size() > 2 ? gate.inputs[2] : kNoValue;
    const ValueId b_up = up.inputs.size() > 2 ? up.inputs[2] : kNoValue;
    // The fused node sits where the gate projection was; both weights and x exist by then.
    gate.inputs = {gate.inputs[0], gate.inputs[1], w_up};
    if (b_gate != kNoValue || b_up != kNoValue) {
      gate.inputs.push_back(b_gate);
      gate.inputs.push_back(b_up);
    }
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
