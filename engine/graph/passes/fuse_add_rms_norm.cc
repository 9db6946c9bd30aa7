#include "engine/graph/passes/passes.h"

namespace sampan::graph::passes {

int fuse_add_rms_norm(Graph& graph) {
  int fused = 0;
  for (NodeId r = 0; r < static_cast<NodeId>(graph.nodes().size()); ++r) {
    const Node& norm = graph.node(r);
    if (norm.dead || norm.op != "rms_norm") continue;
    const Value& x = graph.value(norm.inputs[0]);
    if (x.kind != ValueKind::kIntermediate) continue;
    Node& add = graph.mutable_node(x.producer);
    if (add.dead || add.op != "add" || add.outputs.size() != 1) continue;
    // The add's node keeps its sum output (other readers, e.g. the next residual add, still see
    // it) and takes over the norm's output as its second output.
    const ValueId normed = norm.outputs[0];
    add.op = "add_rms_norm";
    add.inputs.push_back(norm.inputs[1]);
    add.attrs.set("eps", norm.attrs.get_float("eps"));
    add.outputs.push_back(normed);
    graph.mutable_value(normed).producer = x.producer;
    graph.mutable_node(r).dead = true;
    ++fused;
  }
  return fused;
}

}  // namespace sampan::graph::passes
