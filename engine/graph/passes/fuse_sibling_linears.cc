#include <algorithm>

#include "engine/graph/passes/passes.h"
#include "kernels/common/gemm_weights.h"

namespace sampan::graph::passes {
namespace {

bool plain_linear(const Node& n) {
  return !n.dead && n.op == "linear" && n.attrs.get_int("n_blocks", 1) == 1 &&
         n.attrs.get_string("epilogue", "store") == "store";
}

// Input slot s (1 weight, 2 bias, 3 scales, 4 zeros) of a one-block linear, kNoValue if absent.
ValueId slot_of(const Node& n, size_t s) { return s < n.inputs.size() ? n.inputs[s] : kNoValue; }

// Blocks share one GEMM only in the same format: same weight type and, for quantized weights,
// the same group size and scale type (engine/ops/linear.cc).
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

// Fuses one group if any; returns false when none is left.
bool fuse_one(Graph& graph) {
  const auto& nodes = graph.nodes();
  for (NodeId a = 0; a < static_cast<NodeId>(nodes.size()); ++a) {
    if (!plain_linear(nodes[static_cast<size_t>(a)])) continue;
    const Node& first = nodes[static_cast<size_t>(a)];
    std::vector<NodeId> group = {a};
    for (NodeId b = a + 1; b < static_cast<NodeId>(nodes.size()) &&
                           static_cast<int>(group.size()) < kMaxGemmBlocks;
         ++b) {
      const Node& n = nodes[static_cast<size_t>(b)];
      if (plain_linear(n) && n.inputs[0] == first.inputs[0] && same_format(graph, first, n)) {
        group.push_back(b);
      }
    }
    if (group.size() < 2) continue;

    // slots[s]: slot s of every block, in group order (the fused node's fixed layout).
    std::vector<std::vector<ValueId>> slots(5);
    std::vector<ValueId> outs;
    for (NodeId n : group) {
      for (size_t s = 1; s <= 4; ++s) slots[s].push_back(slot_of(graph.node(n), s));
      outs.push_back(graph.node(n).outputs[0]);
    }
    const std::vector<ValueId>& weights = slots[1];
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
    size_t last = 1;  // trailing slot groups with nothing in them are left out
    for (size_t s = 1; s <= 4; ++s) {
      if (std::any_of(slots[s].begin(), slots[s].end(), [](ValueId v) { return v != kNoValue; })) {
        last = s;
      }
    }
    for (size_t s = 1; s <= last; ++s) {
      fused.inputs.insert(fused.inputs.end(), slots[s].begin(), slots[s].end());
    }
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
