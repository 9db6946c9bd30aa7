// convert_precision_bf16 (precision_passes.h).
#include "engine/graph/passes/precision_passes.h"

#include <map>

#include "kernels/common/half.h"

namespace sampan::graph::passes {
namespace {

// The f32 CPU constant behind v, or null.
const Tensor* f32_constant(const Graph& graph, ValueId v) {
  if (v == kNoValue) return nullptr;
  const Value& val = graph.value(v);
  if (val.kind != ValueKind::kConstant || val.constant.dtype() != DType::kF32 ||
      val.constant.device().type != DeviceType::kCPU) {
    return nullptr;
  }
  return &val.constant;
}

// Whether node n's GEMM operand (input 1) can run in bf16.
bool eligible(const Graph& graph, const Node& n) {
  if (n.dead || n.inputs.size() < 2 || n.attrs.get_string("precision", "f32") != "f32") {
    return false;
  }
  const Tensor* w = f32_constant(graph, n.inputs[1]);
  if (!w) return false;
  if (n.op == "conv2d") {
    // Depthwise convs (one input channel per group) run a direct kernel, not the GEMM.
    return w->rank() == 4 && !(w->dim(1) == 1 && n.attrs.get_int("group", 1) > 1);
  }
  if (n.op == "matmul") return w->rank() == 2 && n.attrs.get_int("trans_b", 0) == 0;
  return false;
}

Tensor to_bf16(const Tensor& t) {
  const Tensor src = t.contiguous();
  Tensor out = Tensor::empty(src.shape(), DType::kBF16);
  const float* s = src.data<float>();
  uint16_t* d = out.data<uint16_t>();
  for (int64_t i = 0, n = src.numel(); i < n; ++i) d[i] = f32_to_bf16(s[i]);
  return out;
}

}  // namespace

bool wants_bf16(const PassOptions& options) { return options.bf16; }

int convert_precision_bf16(Graph& graph) {
  int marked = 0;
  std::map<ValueId, ValueId> converted;  // f32 constant -> its bf16 copy
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (!eligible(graph, graph.nodes()[i])) continue;
    const ValueId w = graph.nodes()[i].inputs[1];
    auto it = converted.find(w);
    if (it == converted.end()) {
      const Value& v = graph.value(w);
      it = converted.emplace(w, graph.add_constant(v.name + ".bf16", to_bf16(v.constant))).first;
    }
    Node& n = graph.mutable_nodes()[i];
    n.inputs[1] = it->second;
    n.attrs.set("precision", std::string("bf16"));
    ++marked;
  }
  return marked;
}

}  // namespace sampan::graph::passes
