// reshape(x [any], shape i32/i64 [k]) -> x's elements in row-major order with k dims; attribute
// allowzero (default 0). ONNX Reshape: a 0 copies the input's dim at that index (allowzero=1: a
// real 0), one -1 takes what is left. The shape input's value must be known at inference
// (TensorDesc::value): the plan cannot depend on data only the run computes.
//
// A view op: the output aliases x (no kernel, no planned buffer). A view function sees only the
// input tensors, not the inferred output shape, so inference records the shape it resolved in
// the node's parsed attributes (the executor hands the same attributes to infer and to the view
// and infers again whenever an input shape changes). A view of another input shape, or without
// inference, resolves the shape again from the shape tensor's contents. A non-contiguous x (a
// split output) is copied on the CPU (shape_util.h, reshaped()).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

struct ReshapeAttrs final : OpAttrs {
  bool allowzero = false;
  // The last inference's input shape and resolved output shape (see the top of the file).
  mutable std::optional<std::pair<Shape, Shape>> planned;
};

ReshapeAttrs parse(const graph::Node& node) {
  ReshapeAttrs a;
  a.allowzero = node.attrs.get_int("allowzero", 0) != 0;
  return a;
}

Shape resolve(const graph::Node& node, bool allowzero, const Shape& in,
              const std::vector<int64_t>& target) {
  Shape out(target.size());
  int infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t t = target[i];
    if (t == -1) {
      SAMPAN_CHECK(infer_at < 0, ErrorCode::kInvalidArgument,
                   "node '{}' (reshape): the target shape {} has two -1 dims", node.name,
                   shape_str(target));
      infer_at = static_cast<int>(i);
      continue;
    }
    SAMPAN_CHECK(t >= 0, ErrorCode::kInvalidArgument,
                 "node '{}' (reshape): the target shape {} has dim {} = {}", node.name,
                 shape_str(target), i, t);
    if (t == 0 && !allowzero) {
      SAMPAN_CHECK(i < in.size(), ErrorCode::kInvalidArgument,
                   "node '{}' (reshape): target dim {} is 0 (copy the input's) but the input {} "
                   "has rank {}",
                   node.name, i, shape_str(in), in.size());
      out[i] = in[i];
      continue;
    }
    has_zero |= t == 0;
    out[i] = t;
  }
  const int64_t numel = shape_numel(in);
  if (infer_at >= 0) {
    SAMPAN_CHECK(!has_zero, ErrorCode::kInvalidArgument,
                 "node '{}' (reshape): the target shape {} has both 0 and -1 with allowzero=1",
                 node.name, shape_str(target));
    int64_t known = 1;
    for (size_t i = 0; i < out.size(); ++i) {
      if (static_cast<int>(i) != infer_at) known *= out[i];
    }
    SAMPAN_CHECK(known > 0 && numel % known == 0, ErrorCode::kInvalidArgument,
                 "node '{}' (reshape): cannot reshape {} ({} elements) to {}", node.name,
                 shape_str(in), numel, shape_str(target));
    out[static_cast<size_t>(infer_at)] = numel / known;
  }
  SAMPAN_CHECK(shape_numel(out) == numel, ErrorCode::kInvalidArgument,
               "node '{}' (reshape): cannot reshape {} ({} elements) to {}", node.name,
               shape_str(in), numel, shape_str(target));
  return out;
}

std::vector<TensorDesc> infer(const graph::Node& node, const ReshapeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_int_input(node, in[1], 1, 1);
  const Shape out = resolve(node, a.allowzero, in[0].shape,
                            need_value(node, in[1], "target shape"));
  a.planned = std::make_pair(in[0].shape, out);
  KnownValue value;
  if (in[0].value) value = make_value(in[0].dtype, out, *in[0].value);
  return {{out, in[0].dtype, true, std::move(value)}};
}

std::vector<Tensor> view(const graph::Node& node, const OpAttrs* attrs,
                         const std::vector<Tensor>& in) {
  const auto& a = *static_cast<const ReshapeAttrs*>(attrs);
  if (a.planned && a.planned->first == in[0].shape()) {
    return {reshaped(node, in[0], a.planned->second)};
  }
  const KnownValue target = known_value(in[1]);
  SAMPAN_CHECK(target.has_value(), ErrorCode::kInvalidArgument,
               "node '{}' (reshape): the target shape {} cannot be read", node.name, in[1].str());
  return {reshaped(node, in[0], resolve(node, a.allowzero, in[0].shape(), *target))};
}

const RegisterOp kSchema(with_attrs<ReshapeAttrs>({.name = "reshape", .min_inputs = 2,
                                                   .max_inputs = 2, .view = view},
                                                  {{"allowzero", AttrType::kInt, false}}, parse,
                                                  infer));

}  // namespace
}  // namespace sampan::ops
