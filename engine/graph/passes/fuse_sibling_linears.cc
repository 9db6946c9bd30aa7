#include <algorithm>

#include "engine/graph/passes/passes.h"
#include "kernels/cpu/gemm_cpu.h"

namespace sampan::graph::passes {
namespace {

bool plain_linear(const Node& n) {
  return !n.dead && n.op == "linear" && n.attrs.get_int("n_blocks", 1) == 1 &&
         n.attrs.get_string("epilogue", "store") == "store";
}

ValueId bias_of(const Node& n) { return n.inputs.size() > 2 ? n.inputs[2] : kNoValue; }

// Fuses one group if any; returns false when none is left.
bool fuse_one(Graph& graph) {
  const auto& nodes = graph.nodes();
  for (NodeId a = 0; a < static_cast<NodeId>(nodes.size()); ++a) {
    if (!plain_linear(nodes[static_cast<size_t>(a)])) continue;
    const Node& first = nodes[static_cast<size_t>(a)];
    const DType wtype = graph.value(first.inputs[1]).dtype;
    std::vector<NodeId> group = {a};
    for (NodeId b = a + 1; b < static_cast<NodeId>(nodes.size()) &&
                           static_cast<int>(group.size()) < cpu::kMaxGemmBlocks;
         ++b) {
      const Node& n = nodes[static_cast<size_t>(b)];
      if (plain_linear(n) && n.inputs[0] == first.inputs[0] &&
          graph.value(n.inputs[1]).dtype == wtype) {
        group.push_back(b);
      }
    }
    if (group.size() < 2) continue;

    std::vector<ValueId> weights, biases, outs;
    bool any_bias = false;
    for (NodeId n : group) {
      weights.push_back(graph.node(n).inputs[1]);
      biases.push_back(bias_of(graph.node(n)));
      any_bias = any_bias || biases.back() != kNoValue;
      outs.push_back(graph.node(n).outputs[0]);
    }
    std::vector<int64_t> sizes;
    for (ValueId w : weights) sizes.push_back(graph.value(w).constant.defined() ? graph.value(w).constant.dim(0) : -1);
    // Split sizes must be known when fusing: weights are constants in every graph we build.
    if (std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s < 0; })) continue;

    Node split;
    split.op = "split";
    split.name = first.name + ".split";
    split.attrs.set("sizes", sizes);
    const NodeId split_id = graph.insert_node_before(a + 1, split, static_cast<int>(group.size()));
    const std::vector<ValueId> parts = graph.node(split_id).outputs;
    for (size_t i = 0; i < outs.size(); ++i) graph.replace_uses(outs[i], parts[i]);
    Node& fused = graph.mutable_node(a);
    const ValueId x = fused.inputs[0];
    fused.inputs = {x};
    fused.inputs.insert(fused.inputs.end(), weights.begin(), weights.end());
    if (any_bias) fused.inputs.insert(fused.inputs.end(), biases.begin(), biases.end());
    fused.attrs.set("n_blocks", static_cast<int64_t>(group.size()));
    graph.mutable_node(split_id).inputs = {outs[0]};
    for (size_t i = 1; i < group.size(); ++i) {
      graph.mutable_node(group[i] + 1).dead = true;  // +1: shifted by the inserted split
    }
    return true;
  }
  return false;
}

}  // namespace

int fuse_sibling_linears(Graph& graph) {
  int fused = 0;
  while (fuse_one(graph)) {
    graph.compact();
    ++fused;
  }
  return fused;
}

}  // namespace sampan::graph::passes
