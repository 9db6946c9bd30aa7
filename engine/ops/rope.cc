// rope(x [n_tokens, n_heads * head_dim] f32, positions [n_tokens] i32, inv_freq [head_dim/2] f32)
//   -> [n_tokens, n_heads * head_dim]; attributes n_heads, head_dim, attn_factor (default 1).
// HF rotate_half layout. x may be a column slice of a fused QKV output (row stride > width).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/rope_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  const int64_t heads = node.attrs.get_int("n_heads");
  const int64_t hd = node.attrs.get_int("head_dim");
  SAMPAN_CHECK(heads > 0 && hd > 0 && hd % 2 == 0, ErrorCode::kInvalidArgument,
               "node '{}' (rope): n_heads {} and head_dim {} must be positive, head_dim even",
               node.name, heads, hd);
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_dim(node, in[0], 0, 1, heads * hd);
  expect_rank(node, in[1], 1, 1);
  expect_dtype(node, in[1], 1, DType::kI32);
  expect_dim(node, in[1], 1, 0, in[0].shape[0]);
  expect_rank(node, in[2], 2, 1);
  expect_dtype(node, in[2], 2, DType::kF32);
  expect_dim(node, in[2], 2, 0, hd / 2);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  cpu::rope(x.dim(0), ctx.node.attrs.get_int("n_heads"), ctx.node.attrs.get_int("head_dim"),
            x.data<float>(), row_stride(x), ctx.inputs[1].data<int32_t>(),
            ctx.inputs[2].data<float>(),
            static_cast<float>(ctx.node.attrs.get_float("attn_factor", 1.0)), y.data<float>(),
            row_stride(y), ctx.runner);
}

const RegisterOp kSchema({.name = "rope", .min_inputs = 3, .max_inputs = 3, .infer = infer});
const RegisterKernel kCpu("rope", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
