// drop_identities: importers emit identity where a framework op computes nothing at inference
// (eval-mode dropout, scale by 1 with bias 0, ONNX Identity). Each one costs a copy and, worse,
// sits between the ops other passes match (add -> dropout -> add -> layer_norm), so consumers are
// rewired to the identity's input. An identity that produces a graph output stays: the output
// keeps its own name.
#include "engine/graph/passes/passes.h"

namespace sampan::graph::passes {

int drop_identities(Graph& graph) {
  int dropped = 0;
  for (size_t ni = 0; ni < graph.nodes().size(); ++ni) {
    const Node& n = graph.nodes()[ni];
    if (n.dead || n.op != "identity" || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
    if (n.inputs[0] == kNoValue || graph.is_output(n.outputs[0])) continue;
    const ValueId from = n.outputs[0];
    const ValueId to = n.inputs[0];
    graph.replace_uses(from, to);
    graph.mutable_nodes()[ni].dead = true;
    ++dropped;
  }
  return dropped;
}

}  // namespace sampan::graph::passes
