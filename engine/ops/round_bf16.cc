// round_bf16(x [rows, cols] f32) -> [rows, cols] f32: each value rounded to the nearest bf16
// (kernels/cpu/round_bf16_cpu.h). Attribute grad_only (default 0): 1 copies x unchanged and
// leaves the rounding to the gradient rule. Training in bf16 precision puts it on the operands
// of every projection GEMM (train/train_graph.h): rounding on the inputs, grad_only on the
// outputs, so the backward GEMMs get bf16 output gradients while every forward sum stays f32.
#include <algorithm>

#include "engine/ops/op_registry.h"
#include "kernels/cpu/round_bf16_cpu.h"

namespace sampan::ops {
namespace {

struct RoundBf16Attrs final : OpAttrs {
  bool grad_only = false;
};

RoundBf16Attrs parse(const graph::Node& node) {
  RoundBf16Attrs a;
  a.grad_only = node.attrs.get_int("grad_only", 0) != 0;
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const RoundBf16Attrs&,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  if (ctx.attrs_as<RoundBf16Attrs>().grad_only) {
    for (int64_t r = 0; r < x.dim(0); ++r) {
      std::copy(x.data<float>() + r * row_stride(x), x.data<float>() + r * row_stride(x) + x.dim(1),
                y.data<float>() + r * row_stride(y));
    }
    return;
  }
  cpu::round_bf16(x.dim(0), x.dim(1), x.data<float>(), row_stride(x), y.data<float>(),
                  row_stride(y), ctx.runner);
}

const RegisterOp kSchema(
    with_attrs<RoundBf16Attrs>({.name = "round_bf16", .min_inputs = 1, .max_inputs = 1},
                               {{"grad_only", AttrType::kInt, false}}, parse, infer));
const RegisterKernel kCpu("round_bf16", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
