// split(x [d0, ..., d(r-1)]) -> views of x, output i taking sizes[i] along axis; attributes sizes
// (one per output, none negative, summing to d(axis)) and axis (default -1). Without sizes the
// axis is cut into as many parts as the node has outputs, each ceil(d / n) long and the last one
// what remains (ONNX 18's num_outputs, paddle's split_with_num); `exact` = 1 asks that n divide d
// (ONNX 13's split without sizes), otherwise the node is refused when the shape is known. A view op: the
// outputs alias x's memory with x's strides, no kernel runs. The LLM graph splits a fused
// [rows, n] projection along the last axis (its consumers read rows at stride n); ONNX/Paddle
// graphs split along any axis. Known values are split too.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

// Only this file reads them: a view op has no backend files.
struct SplitAttrs final : OpAttrs {
  std::vector<int64_t> sizes;  // one per output, none negative; empty: equal parts
  int64_t axis = -1;           // as given; normalised against x's rank
  int64_t parts = 0;           // outputs, when sizes is empty
  bool exact = false;          // equal parts must divide the axis
};

// The sizes of `a` along an axis of length d.
std::vector<int64_t> sizes_for(const graph::Node& node, const SplitAttrs& a, int64_t d) {
  if (!a.sizes.empty()) return a.sizes;
  const int64_t chunk = (d + a.parts - 1) / a.parts;
  SAMPAN_CHECK(!a.exact || d % a.parts == 0, ErrorCode::kInvalidArgument,
               "node '{}' (split): {} equal parts do not divide dimension {}", node.name, a.parts, d);
  SAMPAN_CHECK(chunk * (a.parts - 1) < d || (d == 0), ErrorCode::kInvalidArgument,
               "node '{}' (split): dimension {} is too short for {} parts", node.name, d, a.parts);
  std::vector<int64_t> sizes(static_cast<size_t>(a.parts), chunk);
  sizes.back() = d - chunk * (a.parts - 1);
  return sizes;
}

SplitAttrs parse(const graph::Node& node) {
  SplitAttrs a;
  a.axis = node.attrs.get_int("axis", -1);
  a.exact = node.attrs.get_int("exact", 0) != 0;
  if (!node.attrs.has("sizes")) {
    a.parts = static_cast<int64_t>(node.outputs.size());
    SAMPAN_CHECK(a.parts > 0, ErrorCode::kInvalidArgument, "node '{}' (split): no outputs", node.name);
    return a;
  }
  a.sizes = node.attrs.get_ints("sizes");
  SAMPAN_CHECK(a.sizes.size() == node.outputs.size(), ErrorCode::kInvalidArgument,
               "node '{}' (split): {} sizes for {} outputs", node.name, a.sizes.size(),
               node.outputs.size());
  for (int64_t s : a.sizes) {
    SAMPAN_CHECK(s >= 0, ErrorCode::kInvalidArgument, "node '{}' (split): negative size",
                 node.name);
  }
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const SplitAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const Shape& x = in[0].shape;
  const int axis = normalize_axis(node, a.axis, static_cast<int>(x.size()));
  const std::vector<int64_t> sizes = sizes_for(node, a, x[static_cast<size_t>(axis)]);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  expect_dim(node, in[0], 0, axis, total);
  const Shape strides = contiguous_strides(x);
  std::vector<TensorDesc> out;
  int64_t begin = 0;
  for (int64_t s : sizes) {
    Shape shape = x;
    shape[static_cast<size_t>(axis)] = s;
    KnownValue value;
    if (in[0].value && tracks_value(in[0].dtype, shape)) {
      value = pick_strided(*in[0].value, shape, begin * strides[static_cast<size_t>(axis)],
                           strides);
    }
    out.push_back({shape, in[0].dtype, true, std::move(value)});
    begin += s;
  }
  return out;
}

std::vector<Tensor> view(const graph::Node& node, const OpAttrs* attrs,
                         const std::vector<Tensor>& in) {
  const auto& a = *static_cast<const SplitAttrs*>(attrs);
  const int axis = normalize_axis(node, a.axis, in[0].rank());
  std::vector<Tensor> out;
  int64_t begin = 0;
  for (int64_t s : sizes_for(node, a, in[0].shape()[static_cast<size_t>(axis)])) {
    out.push_back(in[0].slice(axis, begin, begin + s));
    begin += s;
  }
  return out;
}

const RegisterOp kSchema(with_attrs<SplitAttrs>({.name = "split", .min_inputs = 1,
                                                 .max_inputs = 1, .n_outputs = -1, .view = view},
                                                {{"sizes", AttrType::kInts, false},
                                                 {"axis", AttrType::kInt, false},
                                                 {"exact", AttrType::kInt, false}},
                                                parse, infer));

}  // namespace
}  // namespace sampan::ops
