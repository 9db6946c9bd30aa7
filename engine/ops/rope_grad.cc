// rope_grad(dy [n_tokens, n_heads * head_dim] f32, positions [n_tokens] i32,
//           inv_freq [head_dim/2] f32) -> dx
// The backward of rope (the transposed rotation; kernels/cpu/rope_grad_cpu.h); attributes as
// rope's: n_heads, head_dim, attn_factor (default 1).
#include "engine/core/error.h"
#include "engine/ops/rope.h"
#include "kernels/cpu/rope_grad_cpu.h"

namespace sampan::ops {
namespace {

RopeAttrs parse(const graph::Node& node) {
  RopeAttrs a;
  a.n_heads = node.attrs.get_int("n_heads");
  a.head_dim = node.attrs.get_int("head_dim");
  SAMPAN_CHECK(a.n_heads > 0 && a.head_dim > 0 && a.head_dim % 2 == 0, ErrorCode::kInvalidArgument,
               "node '{}' (rope_grad): n_heads {} and head_dim {} must be positive, head_dim even",
               node.name, a.n_heads, a.head_dim);
  a.attn_factor = static_cast<float>(node.attrs.get_float("attn_factor", 1.0));
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const RopeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_dim(node, in[0], 0, 1, a.n_heads * a.head_dim);
  expect_rank(node, in[1], 1, 1);
  expect_dtype(node, in[1], 1, DType::kI32);
  expect_dim(node, in[1], 1, 0, in[0].shape[0]);
  expect_rank(node, in[2], 2, 1);
  expect_dtype(node, in[2], 2, DType::kF32);
  expect_dim(node, in[2], 2, 0, a.head_dim / 2);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<RopeAttrs>();
  const Tensor& dy = ctx.inputs[0];
  const Tensor& dx = ctx.outputs[0];
  cpu::rope_backward<float>(dy.dim(0), a.n_heads, a.head_dim, dy.data<float>(), row_stride(dy),
                            ctx.inputs[1].data<int32_t>(), ctx.inputs[2].data<float>(),
                            a.attn_factor, dx.data<float>(), row_stride(dx), ctx.runner);
}

const RegisterOp kSchema(
    with_attrs<RopeAttrs>({.name = "rope_grad", .min_inputs = 3, .max_inputs = 3},
                          {{"n_heads", AttrType::kInt},
                           {"head_dim", AttrType::kInt},
                           {"attn_factor", AttrType::kFloat, false}},
                          parse, infer));
const RegisterKernel kCpu("rope_grad", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
