// flatten(x [d0, ..., d(r-1)]) -> [d0 * ... * d(axis-1), d(axis) * ... * d(r-1)]; attribute axis
// (default 1, in [-r, r]; 0 gives [1, numel]). A view op aliasing x; a non-contiguous x is
// copied on the CPU (shape_util.h, reshaped()).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

struct FlattenAttrs final : OpAttrs {
  int64_t axis = 1;  // as given; normalised against each input's rank
};

FlattenAttrs parse(const graph::Node& node) {
  FlattenAttrs a;
  a.axis = node.attrs.get_int("axis", 1);
  return a;
}

Shape flat_shape(const graph::Node& node, int64_t axis, const Shape& in) {
  const int r = static_cast<int>(in.size());
  SAMPAN_CHECK(axis >= -r && axis <= r, ErrorCode::kInvalidArgument,
               "node '{}' (flatten): axis {} is out of range for rank {} (-{}..{})", node.name,
               axis, r, r, r);
  const int64_t a = axis < 0 ? axis + r : axis;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < r; ++d) (d < a ? outer : inner) *= in[static_cast<size_t>(d)];
  return {outer, inner};
}

std::vector<TensorDesc> infer(const graph::Node& node, const FlattenAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const Shape out = flat_shape(node, a.axis, in[0].shape);
  KnownValue value;
  if (in[0].value) value = make_value(in[0].dtype, out, *in[0].value);
  return {{out, in[0].dtype, true, std::move(value)}};
}

std::vector<Tensor> view(const graph::Node& node, const OpAttrs* attrs,
                         const std::vector<Tensor>& in) {
  const int64_t axis = static_cast<const FlattenAttrs*>(attrs)->axis;
  return {reshaped(node, in[0], flat_shape(node, axis, in[0].shape()))};
}

const RegisterOp kSchema(with_attrs<FlattenAttrs>({.name = "flatten", .min_inputs = 1,
                                                   .max_inputs = 1, .view = view},
                                                  {{"axis", AttrType::kInt, false}}, parse,
                                                  infer));

}  // namespace
}  // namespace sampan::ops
