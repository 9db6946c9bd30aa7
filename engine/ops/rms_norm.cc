// rms_norm(x [rows, dim] f32, weight [dim] f32) -> [rows, dim]; attribute eps.
#include "engine/ops/rms_norm.h"

#include "engine/ops/op_registry.h"
#include "kernels/cpu/rms_norm_cpu.h"

namespace sampan::ops {

RmsNormAttrs parse_rms_norm_attrs(const graph::Node& node) {
  RmsNormAttrs a;
  a.eps = static_cast<float>(node.attrs.get_float("eps"));
  return a;
}

namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const RmsNormAttrs&,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 1);
  expect_dtype(node, in[1], 1, DType::kF32);
  expect_dim(node, in[1], 1, 0, in[0].shape[1]);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  cpu::rms_norm(x.dim(0), x.dim(1), x.data<float>(), row_stride(x), ctx.inputs[1].data<float>(),
                ctx.attrs_as<RmsNormAttrs>().eps, y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema(with_attrs<RmsNormAttrs>({.name = "rms_norm", .min_inputs = 2,
                                                   .max_inputs = 2},
                                                  {{"eps", AttrType::kFloat}},
                                                  parse_rms_norm_attrs, infer));
const RegisterKernel kCpu("rms_norm", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
