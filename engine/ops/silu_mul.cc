// silu_mul(gate [rows, n], up [rows, n]) -> silu(gate) * up
#include "engine/ops/op_registry.h"
#include "kernels/cpu/silu_mul_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 2);
  expect_dtype(node, in[1], 1, DType::kF32);
  expect_dim(node, in[1], 1, 0, in[0].shape[0]);
  expect_dim(node, in[1], 1, 1, in[0].shape[1]);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& g = ctx.inputs[0];
  const Tensor& u = ctx.inputs[1];
  const Tensor& y = ctx.outputs[0];
  cpu::silu_mul(g.dim(0), g.dim(1), g.data<float>(), row_stride(g), u.data<float>(),
                row_stride(u), y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema({.name = "silu_mul", .min_inputs = 2, .max_inputs = 2, .infer = infer});
const RegisterKernel kCpu("silu_mul", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
