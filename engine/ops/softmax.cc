// softmax(x f32) -> x's shape, along `axis` (default -1; negative counts from the end).
#include <algorithm>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/softmax_cpu.h"

namespace sampan::ops {
namespace {

struct SoftmaxAttrs final : OpAttrs {
  int64_t axis = -1;  // normalised against the input's rank by infer / the kernel
};

SoftmaxAttrs parse(const graph::Node& node) {
  SoftmaxAttrs a;
  a.axis = node.attrs.get_int("axis", -1);
  return a;
}

int64_t norm_axis(const graph::Node& node, int64_t axis, size_t rank) {
  // A rank-0 input has one element and softmax 1 on "its" axis, as numpy's would on a [1].
  const int64_t r = std::max<int64_t>(static_cast<int64_t>(rank), 1);
  SAMPAN_CHECK(axis >= -r && axis < r, ErrorCode::kInvalidArgument,
               "node '{}' (softmax): axis {} out of range for rank {}", node.name, axis, rank);
  return axis < 0 ? axis + r : axis;
}

std::vector<TensorDesc> infer(const graph::Node& node, const SoftmaxAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kF32);
  norm_axis(node, a.axis, in[0].shape.size());
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor x = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  const int axis = static_cast<int>(
      norm_axis(ctx.node, ctx.attrs_as<SoftmaxAttrs>().axis, static_cast<size_t>(x.rank())));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t n = x.rank() == 0 ? 1 : x.dim(axis);
  cpu::softmax(outer, n, inner, x.data<float>(), y.data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<SoftmaxAttrs>({.name = "softmax", .min_inputs = 1,
                                                   .max_inputs = 1},
                                                  {{"axis", AttrType::kInt, false}}, parse,
                                                  infer));
const RegisterKernel kCpu("softmax", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
