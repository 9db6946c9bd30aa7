// squeeze(x [any]) -> x without the listed dims, each of which must be 1; attribute axes (ints;
// absent or empty: every dim of size 1). A view op aliasing x (a non-contiguous x is copied on
// the CPU, shape_util.h); x's known value passes through.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

struct SqueezeAttrs final : OpAttrs {
  std::vector<int64_t> axes;  // as given; normalised against each input's rank
};

SqueezeAttrs parse(const graph::Node& node) {
  SqueezeAttrs a;
  if (node.attrs.has("axes")) a.axes = node.attrs.get_ints("axes");
  return a;
}

Shape squeezed(const graph::Node& node, const std::vector<int64_t>& axes, const Shape& in) {
  const int r = static_cast<int>(in.size());
  std::vector<bool> drop(in.size(), false);
  if (axes.empty()) {
    for (size_t d = 0; d < in.size(); ++d) drop[d] = in[d] == 1;
  }
  for (int a : normalize_axes(node, axes, r)) {
    SAMPAN_CHECK(in[static_cast<size_t>(a)] == 1, ErrorCode::kInvalidArgument,
                 "node '{}' (squeeze): dim {} of {} is not 1", node.name, a, shape_str(in));
    drop[static_cast<size_t>(a)] = true;
  }
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!drop[d]) out.push_back(in[d]);
  }
  return out;
}

std::vector<TensorDesc> infer(const graph::Node& node, const SqueezeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const Shape out = squeezed(node, a.axes, in[0].shape);
  KnownValue value;
  if (in[0].value) value = make_value(in[0].dtype, out, *in[0].value);
  return {{out, in[0].dtype, true, std::move(value)}};
}

std::vector<Tensor> view(const graph::Node& node, const OpAttrs* attrs,
                         const std::vector<Tensor>& in) {
  const auto& axes = static_cast<const SqueezeAttrs*>(attrs)->axes;
  return {reshaped(node, in[0], squeezed(node, axes, in[0].shape()))};
}

const RegisterOp kSchema(with_attrs<SqueezeAttrs>({.name = "squeeze", .min_inputs = 1,
                                                   .max_inputs = 1, .view = view},
                                                  {{"axes", AttrType::kInts, false}}, parse,
                                                  infer));

}  // namespace
}  // namespace sampan::ops
