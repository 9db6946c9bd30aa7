// causal_attention(q [B*T, H*D], k [B*T, Hkv*D], v [B*T, Hkv*D], lengths [B] i32)
//   -> o [B*T, H*D], lse [B*T, H]
// The training form of self-attention: whole padded sequences, no KV cache (the paged
// `attention` op serves inference). Attributes n_heads, n_kv_heads, head_dim, scale,
// sliding_window (default 0), bf16_products (0 or 1, default 0; set by bf16 training). B is the
// length of `lengths`; rows t >= lengths[b] of sequence b are padding (o = 0). lse (the
// log-sum-exp of each row's scaled scores) is kept for causal_attention_grad. Semantics:
// kernels/cpu/causal_attention_cpu.h.
#include "engine/ops/causal_attention.h"

#include "engine/core/error.h"
#include "kernels/cpu/causal_attention_cpu.h"

namespace sampan::ops {

CausalAttentionAttrs parse_causal_attention_attrs(const graph::Node& node) {
  CausalAttentionAttrs a;
  a.n_heads = node.attrs.get_int("n_heads");
  a.n_kv_heads = node.attrs.get_int("n_kv_heads");
  a.head_dim = node.attrs.get_int("head_dim");
  a.scale = node.attrs.get_float("scale");
  a.sliding_window = node.attrs.get_int("sliding_window", 0);
  a.bf16_products = flag_attr(node, "bf16_products");
  SAMPAN_CHECK(a.n_heads > 0 && a.n_kv_heads > 0 && a.head_dim > 0 &&
                   a.n_heads % a.n_kv_heads == 0 && a.sliding_window >= 0,
               ErrorCode::kInvalidArgument,
               "node '{}' ({}): n_heads {} must be a positive multiple of n_kv_heads {}, head_dim "
               "{} positive, sliding_window {} >= 0",
               node.name, node.op, a.n_heads, a.n_kv_heads, a.head_dim, a.sliding_window);
  return a;
}

int64_t check_causal_attention_inputs(const graph::Node& node, const CausalAttentionAttrs& a,
                                      const std::vector<TensorDesc>& in) {
  const int64_t qw = a.n_heads * a.head_dim, kvw = a.n_kv_heads * a.head_dim;
  for (int i = 0; i < 3; ++i) {
    expect_rank(node, in[i], i, 2);
    expect_dtype(node, in[i], i, DType::kF32);
    expect_dim(node, in[i], i, 0, in[0].shape[0]);
    expect_dim(node, in[i], i, 1, i == 0 ? qw : kvw);
  }
  expect_rank(node, in[3], 3, 1);
  expect_dtype(node, in[3], 3, DType::kI32);
  const int64_t rows = in[0].shape[0], batch = in[3].shape[0];
  SAMPAN_CHECK(batch > 0 && rows % batch == 0, ErrorCode::kInvalidArgument,
               "node '{}' ({}): {} rows are not {} sequences of equal length", node.name, node.op,
               rows, batch);
  return batch;
}

cpu::CausalAttentionDims causal_attention_dims(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<CausalAttentionAttrs>();
  const Tensor& lengths = ctx.inputs[3];
  cpu::CausalAttentionDims d;
  d.batch = lengths.dim(0);
  d.seq_len = ctx.inputs[0].dim(0) / d.batch;
  d.n_heads = a.n_heads;
  d.n_kv_heads = a.n_kv_heads;
  d.head_dim = a.head_dim;
  d.scale = a.scale;
  d.window = a.sliding_window;
  d.bf16_products = a.bf16_products;
  const int32_t* len = lengths.data<int32_t>();
  for (int64_t b = 0; b < d.batch; ++b) {
    SAMPAN_CHECK(len[b] >= 0 && len[b] <= d.seq_len, ErrorCode::kInvalidArgument,
                 "node '{}' ({}): lengths[{}] = {} outside [0, {}]", ctx.node.name, ctx.node.op, b,
                 len[b], d.seq_len);
  }
  return d;
}

namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const CausalAttentionAttrs& a,
                              const std::vector<TensorDesc>& in) {
  check_causal_attention_inputs(node, a, in);
  return {{in[0].shape, DType::kF32}, {{in[0].shape[0], a.n_heads}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const cpu::CausalAttentionDims d = causal_attention_dims(ctx);
  const Tensor &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
  const Tensor &o = ctx.outputs[0], &lse = ctx.outputs[1];
  cpu::causal_attention_forward_f32(d, q.data<float>(), row_stride(q), k.data<float>(),
                                    row_stride(k), v.data<float>(), row_stride(v),
                                    ctx.inputs[3].data<int32_t>(), o.data<float>(), row_stride(o),
                                    lse.data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<CausalAttentionAttrs>(
    {.name = "causal_attention", .min_inputs = 4, .max_inputs = 4, .n_outputs = 2},
    kCausalAttentionAttrDecls(), parse_causal_attention_attrs, infer));
const RegisterKernel kCpu("causal_attention", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
