// fuse_conv_residual and fuse_conv_activation (conv_passes.h).
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "engine/core/error.h"
#include "engine/graph/passes/conv_passes.h"
#include "engine/ops/op_registry.h"

namespace sampan::graph::passes {
namespace {

// A conv2d without activation; without a residual too unless `residual_ok`.
bool plain_conv(const Node& conv, bool residual_ok) {
  if (conv.dead || conv.op != "conv2d" || conv.outputs.size() != 1) return false;
  if (!residual_ok && conv.inputs.size() > 3 && conv.inputs[3] != kNoValue) return false;
  return conv.attrs.get_string("activation", "none") == "none";
}

// The conv2d (see plain_conv) producing v when v is read by one node only and is not a graph
// output.
std::optional<NodeId> sole_reader_conv(const Graph& graph, ValueId v, bool residual_ok) {
  if (v == kNoValue) return std::nullopt;
  const Value& val = graph.value(v);
  if (val.kind != ValueKind::kIntermediate || val.producer < 0) return std::nullopt;
  if (!plain_conv(graph.node(val.producer), residual_ok)) return std::nullopt;
  if (graph.is_output(v) || graph.consumers(v).size() != 1) return std::nullopt;
  return val.producer;
}

// Every value's shape with the symbolic input dimensions bound as `bind(symbol index)`, or
// nullopt when some op's inference refuses that binding.
using Shapes = std::vector<std::optional<Shape>>;
std::optional<Shapes> infer_shapes(const Graph& graph, int64_t base) {
  std::map<std::string, int64_t> symbols;
  Shapes shapes(graph.n_values());
  std::vector<DType> dtypes(graph.n_values(), DType::kF32);
  std::vector<ops::KnownValue> values(graph.n_values());
  for (size_t v = 0; v < graph.n_values(); ++v) {
    const Value& val = graph.value(static_cast<ValueId>(v));
    dtypes[v] = val.dtype;
    if (val.kind == ValueKind::kConstant) {
      shapes[v] = val.constant.shape();
      dtypes[v] = val.constant.dtype();
      values[v] = ops::known_value(val.constant);
    } else if (val.kind == ValueKind::kInput) {
      Shape s;
      for (const Dim& d : val.shape) {
        if (!d.symbolic()) {
          s.push_back(d.size);
          continue;
        }
        auto it = symbols.find(d.symbol);
        if (it == symbols.end()) {
          it = symbols.emplace(d.symbol, base + 2 * static_cast<int64_t>(symbols.size())).first;
        }
        s.push_back(it->second);
      }
      shapes[v] = s;
    }
  }
  const ops::OpRegistry& registry = ops::OpRegistry::instance();
  try {
    for (const Node& n : graph.nodes()) {
      if (n.dead) continue;
      std::vector<ops::TensorDesc> in;
      for (ValueId v : n.inputs) {
        if (v == kNoValue) {
          in.push_back({{}, DType::kF32, false});
          continue;
        }
        const size_t i = static_cast<size_t>(v);
        if (!shapes[i]) return std::nullopt;
        in.push_back({*shapes[i], dtypes[i], true, values[i]});
      }
      std::vector<ops::TensorDesc> out = registry.schema(n.op).infer(n, in);
      if (out.size() != n.outputs.size()) return std::nullopt;
      for (size_t i = 0; i < out.size(); ++i) {
        const size_t o = static_cast<size_t>(n.outputs[i]);
        shapes[o] = out[i].shape;
        dtypes[o] = out[i].dtype;
        values[o] = std::move(out[i].value);
      }
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  return shapes;
}

bool same_shape(const std::optional<Shapes>& s, ValueId a, ValueId b) {
  const std::optional<Shape>& x = (*s)[static_cast<size_t>(a)];
  const std::optional<Shape>& y = (*s)[static_cast<size_t>(b)];
  return x && y && *x == *y;
}

bool is_add(const Node& n) {
  return !n.dead && n.op == "binary" && n.inputs.size() == 2 && n.outputs.size() == 1 &&
         n.attrs.get_string("kind", "") == "add";
}

}  // namespace

int fuse_conv_residual(Graph& graph) {
  bool any = false;
  for (const Node& n : graph.nodes()) any = any || is_add(n);
  if (!any) return 0;
  // Two bindings far apart (and different per symbol), so an equality that holds only by
  // coincidence of one binding is not taken for a proof.
  const std::optional<Shapes> s1 = infer_shapes(graph, 64);
  const std::optional<Shapes> s2 = infer_shapes(graph, 97);
  if (!s1 || !s2) return 0;
  int fused = 0;
  for (NodeId a = 0; a < static_cast<NodeId>(graph.nodes().size()); ++a) {
    if (!is_add(graph.node(a))) continue;
    for (int side = 0; side < 2; ++side) {
      const Node& add = graph.node(a);
      const ValueId mine = add.inputs[static_cast<size_t>(side)];
      const ValueId other = add.inputs[static_cast<size_t>(1 - side)];
      if (mine == other) continue;
      const std::optional<NodeId> c = sole_reader_conv(graph, mine, false);
      if (!c || graph.value(other).kind == ValueKind::kConstant) continue;
      if (!same_shape(s1, mine, other) || !same_shape(s2, mine, other)) continue;
      // The add's node becomes the conv (it follows both the conv and r's producer, and
      // precedes every reader of the sum); the conv's node dies.
      Node fusedn = graph.node(*c);
      fusedn.inputs.resize(4, kNoValue);
      fusedn.inputs[3] = other;
      fusedn.outputs = add.outputs;
      graph.mutable_node(*c).dead = true;
      graph.mutable_node(a) = std::move(fusedn);
      ++fused;
      break;
    }
  }
  return fused;
}

int fuse_conv_activation(Graph& graph) {
  int fused = 0;
  for (NodeId u = 0; u < static_cast<NodeId>(graph.nodes().size()); ++u) {
    const Node& un = graph.node(u);
    if (un.dead || un.op != "unary" || un.inputs.size() != 1) continue;
    const std::string kind = un.attrs.get_string("kind", "");
    if (kind != "relu" && kind != "clip" && kind != "sigmoid" && kind != "hard_swish") continue;
    const ValueId y = un.inputs[0];
    const std::optional<NodeId> c = sole_reader_conv(graph, y, true);
    if (!c) continue;
    Node& conv = graph.mutable_node(*c);
    conv.attrs.set("activation", kind);
    if (kind == "clip") {
      constexpr double kInf = std::numeric_limits<double>::infinity();
      conv.attrs.set("act_min", un.attrs.get_float("min", -kInf));
      conv.attrs.set("act_max", un.attrs.get_float("max", kInf));
    }
    const ValueId out = un.outputs[0];
    graph.mutable_node(u).dead = true;
    graph.replace_uses(out, y);
    ++fused;
  }
  return fused;
}

}  // namespace sampan::graph::passes
