// unsqueeze(x [any]) -> x with a dim of size 1 inserted at each of axes (ints, required, in the
// output's numbering: rank(x) + len(axes) dims, negative counting from its end). A view op
// aliasing x (a non-contiguous x is copied on the CPU, shape_util.h); x's known value passes
// through, so a gathered dim becomes the [1] piece a concat of shape pieces expects.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

struct UnsqueezeAttrs final : OpAttrs {
  std::vector<int64_t> axes;  // as given; normalised against each output's rank
};

UnsqueezeAttrs parse(const graph::Node& node) {
  UnsqueezeAttrs a;
  a.axes = node.attrs.get_ints("axes");
  SAMPAN_CHECK(!a.axes.empty(), ErrorCode::kInvalidArgument, "node '{}' (unsqueeze): no axes",
               node.name);
  return a;
}

Shape unsqueezed(const graph::Node& node, const std::vector<int64_t>& axes, const Shape& in) {
  const int r = static_cast<int>(in.size() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(r), false);
  for (int a : normalize_axes(node, axes, r)) inserted[static_cast<size_t>(a)] = true;
  Shape out;
  size_t next = 0;
  for (int d = 0; d < r; ++d) out.push_back(inserted[static_cast<size_t>(d)] ? 1 : in[next++]);
  return out;
}

std::vector<TensorDesc> infer(const graph::Node& node, const UnsqueezeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const Shape out = unsqueezed(node, a.axes, in[0].shape);
  KnownValue value;
  if (in[0].value) value = make_value(in[0].dtype, out, *in[0].value);
  return {{out, in[0].dtype, true, std::move(value)}};
}

std::vector<Tensor> view(const graph::Node& node, const OpAttrs* attrs,
                         const std::vector<Tensor>& in) {
  const auto& axes = static_cast<const UnsqueezeAttrs*>(attrs)->axes;
  return {reshaped(node, in[0], unsqueezed(node, axes, in[0].shape()))};
}

const RegisterOp kSchema(with_attrs<UnsqueezeAttrs>({.name = "unsqueeze", .min_inputs = 1,
                                                     .max_inputs = 1, .view = view},
                                                    {{"axes", AttrType::kInts}}, parse, infer));

}  // namespace
}  // namespace sampan::ops
