// gather_rows(x [rows, n] f32, index [m] i32) -> [m, n]: y[i] = x[index[i]]. Lets a graph
// compute the LM head only for the rows whose logits are wanted (the last token of a prompt).
#include <cstring>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 1);
  expect_dtype(node, in[1], 1, DType::kI32);
  return {{{in[1].shape[0], in[0].shape[1]}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& index = ctx.inputs[1];
  const Tensor& y = ctx.outputs[0];
  const int64_t rows = x.dim(0), n = x.dim(1), ldx = row_stride(x), ldy = row_stride(y);
  const int32_t* idx = index.data<int32_t>();
  for (int64_t i = 0; i < index.dim(0); ++i) {
    SAMPAN_CHECK(idx[i] >= 0 && idx[i] < rows, ErrorCode::kInvalidArgument,
                 "node '{}' (gather_rows): row {} outside [0, {})", ctx.node.name, idx[i], rows);
    std::memcpy(y.data<float>() + i * ldy, x.data<float>() + idx[i] * ldx,
                static_cast<size_t>(n) * sizeof(float));
  }
}

const RegisterOp kSchema({.name = "gather_rows", .min_inputs = 2, .max_inputs = 2, .infer = infer});
const RegisterKernel kCpu("gather_rows", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
