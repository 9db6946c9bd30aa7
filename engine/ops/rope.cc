// rope(x [n_tokens, n_heads * head_dim] f32, positions [n_tokens] i32, inv_freq [head_dim/2] f32)
//   -> [n_tokens, n_heads * head_dim]; attributes n_heads, head_dim, attn_factor (default 1).
// HF rotate_half layout. x may be a column slice of a fused QKV output (row stride > width).
#include "engine/ops/rope.h"

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/rope_cpu.h"

namespace sampan::ops {
namespace {

RopeAttrs parse(const graph::Node& node) {
  RopeAttrs a;
  a.n_heads = node.attrs.get_int("n_heads");
  a.head_dim = node.attrs.get_int("head_dim");
  SAMPAN_CHECK(a.n_heads > 0 && a.head_dim > 0 && a.head_dim % 2 == 0,
               ErrorCode::kInvalidArgument,
               "node '{}' (rope): n_heads {} and head_dim {} must be positive, head_dim even",
               node.name, a.n_heads, a.head_dim);
  a.attn_factor = static_cast<float>(node.attrs.get_float("attn_factor", 1.0));
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const RopeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const int64_t heads = a.n_heads, hd = a.head_dim;
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
  const RopeAttrs& a = ctx.attrs_as<RopeAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  cpu::rope(x.dim(0), a.n_heads, a.head_dim, x.data<float>(), row_stride(x),
            ctx.inputs[1].data<int32_t>(), ctx.inputs[2].data<float>(), a.attn_factor,
            y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema(with_attrs<RopeAttrs>(
    {.name = "rope", .min_inputs = 3, .max_inputs = 3},
    {{"n_heads", AttrType::kInt},
     {"head_dim", AttrType::kInt},
     {"attn_factor", AttrType::kFloat, false}},
    parse, infer));
const RegisterKernel kCpu("rope", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
