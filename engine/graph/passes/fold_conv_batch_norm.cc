// fold_conv_batch_norm (conv_passes.h).
#include <cmath>
#include <vector>

#include "engine/graph/passes/conv_passes.h"

namespace sampan::graph::passes {
namespace {

// The constant f32 vector [n] behind value v, or null.
const float* const_vector(const Graph& graph, ValueId v, int64_t n, std::vector<Tensor>& keep) {
  if (v == kNoValue) return nullptr;
  const Value& val = graph.value(v);
  if (val.kind != ValueKind::kConstant || val.constant.dtype() != DType::kF32 ||
      val.constant.device().type != DeviceType::kCPU || val.constant.shape() != Shape{n}) {
    return nullptr;
  }
  keep.push_back(val.constant.contiguous());
  return keep.back().data<float>();
}

bool plain_conv(const Node& conv) {
  if (conv.dead || conv.op != "conv2d" || conv.outputs.size() != 1) return false;
  if (conv.inputs.size() > 3 && conv.inputs[3] != kNoValue) return false;  // has a residual
  return conv.attrs.get_string("activation", "none") == "none";
}

}  // namespace

int fold_conv_batch_norm(Graph& graph) {
  int folded = 0;
  for (NodeId b = 0; b < static_cast<NodeId>(graph.nodes().size()); ++b) {
    const Node& bn = graph.node(b);
    if (bn.dead || bn.op != "batch_norm" || bn.inputs.size() != 5) continue;
    const ValueId y = bn.inputs[0];
    const Value& yv = graph.value(y);
    if (yv.kind != ValueKind::kIntermediate || yv.producer < 0) continue;
    const NodeId c = yv.producer;
    const Node& conv = graph.node(c);
    if (!plain_conv(conv) || graph.is_output(y) || graph.consumers(y).size() != 1) continue;
    const Value& wv = graph.value(conv.inputs[1]);
    if (wv.kind != ValueKind::kConstant || wv.constant.dtype() != DType::kF32 ||
        wv.constant.device().type != DeviceType::kCPU || wv.constant.shape().size() != 4) {
      continue;
    }
    const int64_t o = wv.constant.dim(0);
    std::vector<Tensor> keep;
    const float* scale = const_vector(graph, bn.inputs[1], o, keep);
    const float* shift = const_vector(graph, bn.inputs[2], o, keep);
    const float* mean = const_vector(graph, bn.inputs[3], o, keep);
    const float* var = const_vector(graph, bn.inputs[4], o, keep);
    const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] != kNoValue;
    const float* bias = has_bias ? const_vector(graph, conv.inputs[2], o, keep) : nullptr;
    if (!scale || !shift || !mean || !var || (has_bias && !bias)) continue;
    const double eps = bn.attrs.get_float("eps", 1e-5);

    const Tensor w = wv.constant.contiguous();
    const int64_t per_out = w.numel() / o;
    std::vector<float> nw(static_cast<size_t>(w.numel()));
    std::vector<float> nb(static_cast<size_t>(o));
    for (int64_t i = 0; i < o; ++i) {
      // In double so the folded constants round once.
      const double s = scale[i] / std::sqrt(static_cast<double>(var[i]) + eps);
      const float* wr = w.data<float>() + i * per_out;
      for (int64_t j = 0; j < per_out; ++j) {
        nw[static_cast<size_t>(i * per_out + j)] = static_cast<float>(wr[j] * s);
      }
      const double b0 = bias ? bias[i] : 0.0;
      nb[static_cast<size_t>(i)] = static_cast<float>((b0 - mean[i]) * s + shift[i]);
    }
    const std::string base = conv.name;
    const ValueId new_w = graph.add_constant(base + ".bn_folded_w", Tensor::from_f32(w.shape(), nw));
    const ValueId new_b = graph.add_constant(base + ".bn_folded_b", Tensor::from_f32({o}, nb));
    Node& cn = graph.mutable_node(c);
    cn.inputs.resize(std::max<size_t>(cn.inputs.size(), 3), kNoValue);
    cn.inputs[1] = new_w;
    cn.inputs[2] = new_b;
    const ValueId normed = graph.node(b).outputs[0];
    graph.mutable_node(b).dead = true;
    graph.replace_uses(normed, y);
    ++folded;
  }
  return folded;
}

}  // namespace sampan::graph::passes
