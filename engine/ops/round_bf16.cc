// round_bf16(x [rows, cols] f32) -> [rows, cols] f32: each value rounded to the nearest bf16
// (kernels/cpu/round_bf16_cpu.h). Training in bf16 precision puts it on the inputs of every
// projection GEMM (train/train_graph.h), and round_grad_bf16 on their outputs.
#include "engine/ops/op_registry.h"
#include "kernels/cpu/round_bf16_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  cpu::round_bf16(x.dim(0), x.dim(1), x.data<float>(), row_stride(x), y.data<float>(),
                  row_stride(y), ctx.runner);
}

const RegisterOp kSchema({.name = "round_bf16", .min_inputs = 1, .max_inputs = 1, .infer = infer});
const RegisterKernel kCpu("round_bf16", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
