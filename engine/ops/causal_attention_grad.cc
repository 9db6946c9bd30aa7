// causal_attention_grad(q, k, v, lengths, o [B*T, H*D], lse [B*T, H], dout [B*T, H*D])
//   -> dq [B*T, H*D], dk [B*T, Hkv*D], dv [B*T, Hkv*D]
// The backward of causal_attention (same attributes; kernels/cpu/causal_attention_cpu.h).
#include "engine/core/error.h"
#include "engine/ops/causal_attention.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const CausalAttentionAttrs& a,
                              const std::vector<TensorDesc>& in) {
  check_causal_attention_inputs(node, a, in);
  expect_dtype(node, in[4], 4, DType::kF32);
  SAMPAN_CHECK(in[4].shape == in[0].shape && in[6].shape == in[0].shape,
               ErrorCode::kInvalidArgument, "node '{}' ({}): o {} and dout {} must match q {}",
               node.name, node.op, shape_str(in[4].shape), shape_str(in[6].shape),
               shape_str(in[0].shape));
  expect_dtype(node, in[5], 5, DType::kF32);
  expect_rank(node, in[5], 5, 2);
  expect_dim(node, in[5], 5, 0, in[0].shape[0]);
  expect_dim(node, in[5], 5, 1, a.n_heads);
  expect_dtype(node, in[6], 6, DType::kF32);
  return {{in[0].shape, DType::kF32}, {in[1].shape, DType::kF32}, {in[2].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const cpu::CausalAttentionDims d = causal_attention_dims(ctx);
  const std::vector<Tensor>& in = ctx.inputs;
  const std::vector<Tensor>& out = ctx.outputs;
  SAMPAN_CHECK(in[5].is_contiguous(), ErrorCode::kInternal, "node '{}': lse not contiguous",
               ctx.node.name);
  cpu::causal_attention_backward_f32(
      d, in[0].data<float>(), row_stride(in[0]), in[1].data<float>(), row_stride(in[1]),
      in[2].data<float>(), row_stride(in[2]), in[3].data<int32_t>(), in[4].data<float>(),
      row_stride(in[4]), in[5].data<float>(), in[6].data<float>(), row_stride(in[6]),
      out[0].data<float>(), row_stride(out[0]), out[1].data<float>(), row_stride(out[1]),
      out[2].data<float>(), row_stride(out[2]), ctx.runner);
}

const RegisterOp kSchema(with_attrs<CausalAttentionAttrs>(
    {.name = "causal_attention_grad", .min_inputs = 7, .max_inputs = 7, .n_outputs = 3},
    kCausalAttentionAttrDecls(), parse_causal_attention_attrs, infer));
const RegisterKernel kCpu("causal_attention_grad", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
