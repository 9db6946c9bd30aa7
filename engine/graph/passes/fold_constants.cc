// fold_constants: a node whose inputs are all constants is run once, on the CPU, when the graph
// is optimised, and its outputs become constants. Importers leave such nodes behind (a weight
// cast or transposed by a Constant -> Cast -> Transpose chain, shape arithmetic on constant
// shapes), and every later pass sees plain constants, which is what the conv/matmul fusions
// match.
#include <memory>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/passes.h"
#include "engine/ops/op_registry.h"

namespace sampan::graph::passes {
namespace {

// Larger results stay computed at run time: folding must not turn a broadcast of a scalar into
// gigabytes of constants.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 22;

bool foldable(const Graph& g, const Node& n) {
  if (n.dead || n.inputs.empty()) return false;
  const ops::OpRegistry& reg = ops::OpRegistry::instance();
  if (!reg.has_schema(n.op) || reg.schema(n.op).has_side_effects) return false;
  if (!reg.supports(n.op, DeviceType::kCPU)) return false;
  bool any = false;
  for (ValueId v : n.inputs) {
    if (v == kNoValue) continue;
    if (g.value(v).kind != ValueKind::kConstant) return false;
    if (g.value(v).constant.device().type != DeviceType::kCPU) return false;
    any = true;
  }
  return any;
}

}  // namespace

int fold_constants(Graph& graph) {
  int folded = 0;
  cpu::SerialRunner runner;
  for (size_t ni = 0; ni < graph.nodes().size(); ++ni) {
    const Node n = graph.nodes()[ni];
    if (!foldable(graph, n)) continue;
    // The node alone, over its constants, in a graph of its own.
    Graph one;
    std::vector<ValueId> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      inputs.push_back(n.inputs[i] == kNoValue
                           ? kNoValue
                           : one.add_constant(graph.value(n.inputs[i]).name, graph.value(n.inputs[i]).constant));
    }
    const std::vector<ValueId> outs =
        one.add_node(n.op, n.name, inputs, n.attrs, static_cast<int>(n.outputs.size()));
    for (ValueId o : outs) one.mark_output(o);
    std::vector<Tensor> results;
    try {
      Executor exec(one, runner);
      results = exec.run({});
    } catch (const Error& e) {
      // The node is wrong for every input (its constants are all it reads): running the graph
      // reports it with the same message, so leave it in place.
      log::debug("fold_constants: node '{}' left as is: {}", n.name, e.what());
      continue;
    }
    bool small = true;
    for (const Tensor& t : results) small = small && t.numel() <= kMaxFoldedElements;
    if (!small) continue;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const ValueId c = graph.add_constant(graph.value(n.outputs[i]).name + "/folded",
                                           results[i].clone());
      graph.replace_uses(n.outputs[i], c);
    }
    graph.mutable_nodes()[ni].dead = true;
    ++folded;
  }
  return folded;
}

}  // namespace sampan::graph::passes
