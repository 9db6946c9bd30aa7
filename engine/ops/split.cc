// split(x [d0, ..., d(r-1)]) -> views of x, output i taking sizes[i] along axis; attributes sizes
// (one per output, none negative, summing to d(axis)) and axis (default -1). A view op: the
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
  std::vector<int64_t> sizes;  // one per output, none negative
  int64_t axis = -1;           // as given; normalised against x's rank
};

SplitAttrs parse(const graph::Node& node) {
  SplitAttrs a;
  a.sizes = node.attrs.get_ints("sizes");
  a.axis = node.attrs.get_int("axis", -1);
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
  int64_t total = 0;
  for (int64_t s : a.sizes) total += s;
  expect_dim(node, in[0], 0, axis, total);
  const Shape strides = contiguous_strides(x);
  std::vector<TensorDesc> out;
  int64_t begin = 0;
  for (int64_t s : a.sizes) {
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
  for (int64_t s : a.sizes) {
    out.push_back(in[0].slice(axis, begin, begin + s));
    begin += s;
  }
  return out;
}

const RegisterOp kSchema(with_attrs<SplitAttrs>({.name = "split", .min_inputs = 1,
                                                 .max_inputs = 1, .n_outputs = -1, .view = view},
                                                {{"sizes", AttrType::kInts},
                                                 {"axis", AttrType::kInt, false}},
                                                parse, infer));

}  // namespace
}  // namespace sampan::ops
