// expand(x [any], shape i32/i64 [k]) -> x broadcast to the numpy broadcast of x's shape and
// `shape` (ONNX Expand: a 1 in `shape` keeps x's dim). The shape input must be known at
// inference (TensorDesc::value). A copy (a kernel op) that reads broadcast dims with stride 0;
// the output's value is known when x's is.
#include <algorithm>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

Shape broadcast(const graph::Node& node, const Shape& x, const std::vector<int64_t>& target) {
  const size_t r = std::max(x.size(), target.size());
  Shape out(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t a = d + x.size() >= r ? x[d + x.size() - r] : 1;
    const int64_t b = d + target.size() >= r ? target[d + target.size() - r] : 1;
    SAMPAN_CHECK(b >= 0 && (a == b || a == 1 || b == 1), ErrorCode::kInvalidArgument,
                 "node '{}' (expand): shapes {} and {} do not broadcast", node.name, shape_str(x),
                 shape_str(target));
    out[d] = a == 1 ? b : a;
  }
  return out;
}

// Strides that read x (with strides `xs`) at every index of `out`: 0 along broadcast dims.
Shape broadcast_strides(const Shape& x, const Shape& xs, const Shape& out) {
  Shape s(out.size(), 0);
  const size_t lead = out.size() - x.size();
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == out[d + lead]) s[d + lead] = xs[d];
  }
  return s;
}

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  element_bytes(node, in[0].dtype);
  expect_int_input(node, in[1], 1, 1);
  const Shape out = broadcast(node, in[0].shape, need_value(node, in[1], "target shape"));
  KnownValue value;
  if (in[0].value && tracks_value(in[0].dtype, out)) {
    value = pick_strided(*in[0].value, out, 0,
                         broadcast_strides(in[0].shape, contiguous_strides(in[0].shape), out));
  }
  return {{out, in[0].dtype, true, std::move(value)}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  copy_into(x, 0, y.shape(), broadcast_strides(x.shape(), x.strides(), y.shape()), y, ctx.runner);
}

const RegisterOp kSchema({.name = "expand", .min_inputs = 2, .max_inputs = 2, .infer = infer});
const RegisterKernel kCpu("expand", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
