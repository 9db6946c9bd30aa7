// rms_norm_grad(x [rows, dim], weight [dim], dy [rows, dim]) -> dx [rows, dim], dweight [dim]
// The backward of rms_norm (kernels/cpu/rms_norm_grad_cpu.h). Attributes eps (as the forward)
// and weight_grad (default 0): when 0, dweight is left zero and not computed (a frozen norm).
#include "engine/ops/op_registry.h"
#include "kernels/cpu/rms_norm_grad_cpu.h"

namespace sampan::ops {
namespace {

struct RmsNormGradAttrs final : OpAttrs {
  double eps = 0;
  bool weight_grad = false;
};

RmsNormGradAttrs parse(const graph::Node& node) {
  RmsNormGradAttrs a;
  // The forward op keeps eps as a float; the backward uses the same rounded value.
  a.eps = static_cast<float>(node.attrs.get_float("eps"));
  a.weight_grad = node.attrs.get_int("weight_grad", 0) != 0;
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const RmsNormGradAttrs&,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 1);
  expect_dtype(node, in[1], 1, DType::kF32);
  expect_dim(node, in[1], 1, 0, in[0].shape[1]);
  expect_rank(node, in[2], 2, 2);
  expect_dtype(node, in[2], 2, DType::kF32);
  expect_dim(node, in[2], 2, 0, in[0].shape[0]);
  expect_dim(node, in[2], 2, 1, in[0].shape[1]);
  return {{in[0].shape, DType::kF32}, {in[1].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<RmsNormGradAttrs>();
  const Tensor &x = ctx.inputs[0], &dy = ctx.inputs[2];
  const Tensor w = ctx.inputs[1].contiguous();
  const Tensor &dx = ctx.outputs[0], &dw = ctx.outputs[1];
  float* dwp = dw.data<float>();
  if (!a.weight_grad) std::fill(dwp, dwp + dw.numel(), 0.0f);
  cpu::rms_norm_backward<float>(x.dim(0), x.dim(1), x.data<float>(), row_stride(x), w.data<float>(),
                                dy.data<float>(), row_stride(dy), a.eps, dx.data<float>(),
                                row_stride(dx), a.weight_grad ? dwp : nullptr, ctx.runner);
}

const RegisterOp kSchema(with_attrs<RmsNormGradAttrs>(
    {.name = "rms_norm_grad", .min_inputs = 3, .max_inputs = 3, .n_outputs = 2},
    {{"eps", AttrType::kFloat}, {"weight_grad", AttrType::kInt, false}}, parse, infer));
const RegisterKernel kCpu("rms_norm_grad", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
