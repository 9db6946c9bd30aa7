// embedding(ids [n_tokens] i32, table [vocab, dim] f32|f16|bf16) -> [n_tokens, dim] f32
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/embedding_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 1);
  expect_dtype(node, in[0], 0, DType::kI32);
  expect_rank(node, in[1], 1, 2);
  SAMPAN_CHECK(in[1].dtype == DType::kF32 || in[1].dtype == DType::kF16 ||
                   in[1].dtype == DType::kBF16,
               ErrorCode::kUnsupported, "node '{}': embedding table of type {} is not supported",
               node.name, dtype_name(in[1].dtype));
  return {{{in[0].shape[0], in[1].shape[1]}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& ids = ctx.inputs[0];
  const Tensor& table = ctx.inputs[1];
  const int64_t vocab = table.dim(0);
  const int32_t* id = ids.data<int32_t>();
  // Ids come from users: check them here so the kernel can index without bounds checks.
  for (int64_t i = 0; i < ids.dim(0); ++i) {
    SAMPAN_CHECK(id[i] >= 0 && id[i] < vocab, ErrorCode::kInvalidArgument,
                 "token id {} at position {} is outside the vocabulary [0, {})", id[i], i, vocab);
  }
  const Tensor& y = ctx.outputs[0];
  cpu::embedding(ids.dim(0), id, table.raw(), table.dtype(), vocab, table.dim(1),
                 y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema({.name = "embedding", .min_inputs = 2, .max_inputs = 2, .infer = infer});
const RegisterKernel kCpu("embedding", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
