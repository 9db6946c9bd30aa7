// add_rms_norm(x [rows, dim], residual [rows, dim], weight [dim]) -> (sum [rows, dim],
// normed [rows, dim]); attribute eps. Made by the fuse_add_rms_norm pass from add + rms_norm.
#include "engine/ops/op_registry.h"
#include "engine/ops/rms_norm.h"
#include "kernels/cpu/rms_norm_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const RmsNormAttrs&,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 2);
  expect_dtype(node, in[1], 1, DType::kF32);
  expect_dim(node, in[1], 1, 0, in[0].shape[0]);
  expect_dim(node, in[1], 1, 1, in[0].shape[1]);
  expect_rank(node, in[2], 2, 1);
  expect_dtype(node, in[2], 2, DType::kF32);
  expect_dim(node, in[2], 2, 0, in[0].shape[1]);
  return {{in[0].shape, DType::kF32}, {in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& r = ctx.inputs[1];
  const Tensor& sum = ctx.outputs[0];
  const Tensor& y = ctx.outputs[1];
  cpu::add_rms_norm(x.dim(0), x.dim(1), x.data<float>(), row_stride(x), r.data<float>(),
                    row_stride(r), ctx.inputs[2].data<float>(),
                    ctx.attrs_as<RmsNormAttrs>().eps, sum.data<float>(),
                    row_stride(sum), y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema(with_attrs<RmsNormAttrs>(
    {.name = "add_rms_norm", .min_inputs = 3, .max_inputs = 3, .n_outputs = 2},
    {{"eps", AttrType::kFloat}}, parse_rms_norm_attrs, infer));
const RegisterKernel kCpu("add_rms_norm", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
