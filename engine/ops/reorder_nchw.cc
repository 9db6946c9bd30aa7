// reorder_nchw(x [N, ceil(C / B), H, W, B] f32) -> y [N, C, H, W]: out of the blocked layout of
// the blocked conv (kernels/cpu/conv_nchwc_cpu.h), dropping the padded channels.
// Attribute: channels (C, at most ceil(C / B) * B and more than (ceil(C / B) - 1) * B).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/conv_nchwc_cpu.h"

namespace sampan::ops {
namespace {

struct ReorderAttrs final : OpAttrs {
  int64_t channels = 0;
};

ReorderAttrs parse(const graph::Node& node) {
  ReorderAttrs a;
  a.channels = node.attrs.get_int("channels");
  SAMPAN_CHECK(a.channels >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (reorder_nchw): channels = {} < 1", node.name, a.channels);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const ReorderAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 5);
  expect_dtype(node, in[0], 0, DType::kF32);
  const Shape& x = in[0].shape;
  const int64_t b = x[4];
  SAMPAN_CHECK(b >= 1 && (a.channels + b - 1) / b == x[1], ErrorCode::kInvalidArgument,
               "node '{}' (reorder_nchw): {} channels do not fill the blocked input {}",
               node.name, a.channels, shape_str(x));
  return {{{x[0], a.channels, x[2], x[3]}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const int64_t channels = ctx.attrs_as<ReorderAttrs>().channels;
  const Tensor x = ctx.inputs[0].contiguous();
  const Shape& s = x.shape();
  cpu::reorder_to_nchw(s[0], channels, s[2] * s[3], s[4], x.data<float>(),
                       ctx.outputs[0].data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<ReorderAttrs>({.name = "reorder_nchw", .min_inputs = 1,
                                                   .max_inputs = 1},
                                                  {{"channels", AttrType::kInt}}, parse, infer));
const RegisterKernel kCpu("reorder_nchw", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
