// reorder_nchwc(x [N, C, H, W] f32) -> y [N, ceil(C / block), H, W, block]: into the blocked
// layout of the blocked conv (kernels/cpu/conv_nchwc_cpu.h); channels past C are zeros.
// Attribute: block (8 or 16).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/conv_nchwc_cpu.h"

namespace sampan::ops {
namespace {

struct ReorderAttrs final : OpAttrs {
  int64_t block = 16;
};

ReorderAttrs parse(const graph::Node& node) {
  ReorderAttrs a;
  a.block = node.attrs.get_int("block");
  SAMPAN_CHECK(a.block == 8 || a.block == 16, ErrorCode::kInvalidArgument,
               "node '{}' (reorder_nchwc): block = {}, expected 8 or 16", node.name, a.block);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const ReorderAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 4);
  expect_dtype(node, in[0], 0, DType::kF32);
  const Shape& x = in[0].shape;
  return {{{x[0], (x[1] + a.block - 1) / a.block, x[2], x[3], a.block}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const int64_t block = ctx.attrs_as<ReorderAttrs>().block;
  const Tensor x = ctx.inputs[0].contiguous();
  const Shape& s = x.shape();
  cpu::reorder_to_nchwc(s[0], s[1], s[2] * s[3], block, x.data<float>(),
                        ctx.outputs[0].data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<ReorderAttrs>({.name = "reorder_nchwc", .min_inputs = 1,
                                                   .max_inputs = 1},
                                                  {{"block", AttrType::kInt}}, parse, infer));
const RegisterKernel kCpu("reorder_nchwc", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
