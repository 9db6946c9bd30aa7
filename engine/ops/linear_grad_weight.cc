// linear_grad_weight(dy [rows, n] f32, x [rows, k] f32) -> dw [n, k] = dyᵀ · x
// The weight gradient of `linear` for a trained f32 weight (LoRA's A and B), on the f32 GEMM
// (kernels/cpu/linear_grad_cpu.h).
#include "engine/ops/op_registry.h"
#include "kernels/cpu/linear_grad_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  for (int i = 0; i < 2; ++i) {
    expect_rank(node, in[i], i, 2);
    expect_dtype(node, in[i], i, DType::kF32);
  }
  expect_dim(node, in[1], 1, 0, in[0].shape[0]);
  return {{{in[0].shape[1], in[1].shape[1]}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& dy = ctx.inputs[0];
  const Tensor& x = ctx.inputs[1];
  const Tensor& dw = ctx.outputs[0];
  cpu::linear_grad_weight(dy.dim(0), dy.dim(1), x.dim(1), dy.data<float>(), row_stride(dy),
                          x.data<float>(), row_stride(x), dw.data<float>(), false, ctx.runner);
}

const RegisterOp kSchema(
    {.name = "linear_grad_weight", .min_inputs = 2, .max_inputs = 2, .infer = infer});
const RegisterKernel kCpu("linear_grad_weight", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
