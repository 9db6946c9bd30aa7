// silu_mul_grad(gate [rows, n], up [rows, n], dy [rows, n]) -> dgate, dup
// The backward of silu_mul (kernels/cpu/silu_mul_grad_cpu.h).
#include "engine/ops/op_registry.h"
#include "kernels/cpu/silu_mul_grad_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  for (int i = 0; i < 3; ++i) {
    expect_rank(node, in[i], i, 2);
    expect_dtype(node, in[i], i, DType::kF32);
    expect_dim(node, in[i], i, 0, in[0].shape[0]);
    expect_dim(node, in[i], i, 1, in[0].shape[1]);
  }
  return {{in[0].shape, DType::kF32}, {in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor &g = ctx.inputs[0], &u = ctx.inputs[1], &dy = ctx.inputs[2];
  const Tensor &dg = ctx.outputs[0], &du = ctx.outputs[1];
  cpu::silu_mul_backward<float>(g.dim(0), g.dim(1), g.data<float>(), row_stride(g), u.data<float>(),
                                row_stride(u), dy.data<float>(), row_stride(dy), dg.data<float>(),
                                row_stride(dg), du.data<float>(), row_stride(du), ctx.runner);
}

const RegisterOp kSchema(
    {.name = "silu_mul_grad", .min_inputs = 3, .max_inputs = 3, .n_outputs = 2, .infer = infer});
const RegisterKernel kCpu("silu_mul_grad", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
