// attention_nc(q [B, Sq, H·D], k [B, Sk, H·D], v [B, Sk, H·Dv], mask (opt)) -> [B, Sq, H·Dv]:
// non-causal multi-head attention. Attributes n_heads (H), scale (default 1/sqrt(D)).
//   out[b, i, h·Dv + d] = Σ_j softmax_j(scale · q_bih·k_bjh + mask[b, h, i, j]) · v[b, j, h·Dv + d]
// The mask is additive f32 of rank <= 4, numpy-broadcastable to [B, H, Sq, Sk] (BERT exports
// give [B, 1, 1, Sk] or [B, 1, Sq, Sk]): exactly what `scores + mask` of the unfused graph
// computes. q, k and v need contiguous rows only (views of one fused QKV output read in place).
// Made by the fuse_encoder_attention pass (engine/graph/passes/encoder_passes.h).
#include "engine/ops/attention_nc.h"

#include "engine/core/error.h"
#include "engine/ops/broadcast.h"
#include "kernels/cpu/attention_nc_cpu.h"

namespace sampan::ops {
namespace {

struct Dims {
  int64_t b, sq, sk, h, d, dv;
};

Dims dims_of(const graph::Node& node, const AttentionNcAttrs& a, const Shape& q, const Shape& k,
             const Shape& v) {
  SAMPAN_CHECK(q.size() == 3 && k.size() == 3 && v.size() == 3, ErrorCode::kInvalidArgument,
               "node '{}' (attention_nc): q, k, v of shape {}, {}, {}, expected rank 3", node.name,
               shape_str(q), shape_str(k), shape_str(v));
  SAMPAN_CHECK(k[0] == q[0] && v[0] == q[0] && v[1] == k[1] && k[2] == q[2],
               ErrorCode::kInvalidArgument,
               "node '{}' (attention_nc): q, k, v of shape {}, {}, {} do not match "
               "([B, Sq, H·D], [B, Sk, H·D], [B, Sk, H·Dv])",
               node.name, shape_str(q), shape_str(k), shape_str(v));
  SAMPAN_CHECK(q[2] % a.n_heads == 0 && v[2] % a.n_heads == 0, ErrorCode::kInvalidArgument,
               "node '{}' (attention_nc): n_heads {} does not divide q's {} or v's {} columns",
               node.name, a.n_heads, q[2], v[2]);
  return {q[0], q[1], k[1], a.n_heads, q[2] / a.n_heads, v[2] / a.n_heads};
}

bool has_mask(const std::vector<TensorDesc>& in) { return in.size() > 3 && in[3].present; }

std::vector<TensorDesc> infer(const graph::Node& node, const AttentionNcAttrs& a,
                              const std::vector<TensorDesc>& in) {
  for (int i = 0; i < 3; ++i) expect_dtype(node, in[static_cast<size_t>(i)], i, DType::kF32);
  const Dims d = dims_of(node, a, in[0].shape, in[1].shape, in[2].shape);
  if (has_mask(in)) {
    expect_dtype(node, in[3], 3, DType::kF32);
    const Shape full = {d.b, d.h, d.sq, d.sk};
    SAMPAN_CHECK(in[3].shape.size() <= 4 && broadcast_shapes(node, in[3].shape, full) == full,
                 ErrorCode::kInvalidArgument,
                 "node '{}' (attention_nc): mask of shape {} does not broadcast to {}",
                 node.name, shape_str(in[3].shape), shape_str(full));
  }
  return {{{d.b, d.sq, d.h * d.dv}, DType::kF32}};
}

// A rank-3 view with contiguous rows, as the kernel reads it (packed when it is not one).
cpu::AttnNcRows rows_of(const Tensor& t, Tensor& keep) {
  keep = t.rank() == 3 && t.rows_contiguous() ? t : t.contiguous();
  return {keep.data<float>(), keep.stride(0), keep.stride(1)};
}

void run_cpu(const KernelContext& ctx) {
  const AttentionNcAttrs& a = ctx.attrs_as<AttentionNcAttrs>();
  const Dims d = dims_of(ctx.node, a, ctx.inputs[0].shape(), ctx.inputs[1].shape(),
                         ctx.inputs[2].shape());
  Tensor q, k, v, m;
  const cpu::AttnNcRows qr = rows_of(ctx.inputs[0], q);
  const cpu::AttnNcRows kr = rows_of(ctx.inputs[1], k);
  const cpu::AttnNcRows vr = rows_of(ctx.inputs[2], v);
  cpu::AttnNcMask mask;
  if (ctx.inputs.size() > 3 && ctx.inputs[3].defined()) {
    m = ctx.inputs[3].is_contiguous() ? ctx.inputs[3] : ctx.inputs[3].contiguous();
    const Shape full = {d.b, d.h, d.sq, d.sk};
    const Shape st = broadcast_strides(m.shape(), contiguous_strides(m.shape()), full);
    mask = {m.data<float>(), st[0], st[1], st[2], st[3]};
  }
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal, "node '{}': output not contiguous",
               ctx.node.name);
  const float scale = std::isnan(a.scale)
                          ? (d.d > 0 ? 1.0f / std::sqrt(static_cast<float>(d.d)) : 1.0f)
                          : a.scale;
  cpu::attention_nc({d.b, d.sq, d.sk, d.h, d.d, d.dv}, qr, kr, vr, mask, scale, y.data<float>(),
                    d.sq * d.h * d.dv, d.h * d.dv, ctx.runner);
}

}  // namespace

AttentionNcAttrs parse_attention_nc_attrs(const graph::Node& node) {
  AttentionNcAttrs a;
  a.n_heads = node.attrs.get_int("n_heads");
  SAMPAN_CHECK(a.n_heads > 0, ErrorCode::kInvalidArgument,
               "node '{}' (attention_nc): n_heads {} must be positive", node.name, a.n_heads);
  if (node.attrs.has("scale")) {
    a.scale = static_cast<float>(node.attrs.get_float("scale"));
    SAMPAN_CHECK(std::isfinite(a.scale), ErrorCode::kInvalidArgument,
                 "node '{}' (attention_nc): scale {} is not finite", node.name, a.scale);
  }
  return a;
}

namespace {
const RegisterOp kSchema(with_attrs<AttentionNcAttrs>(
    {.name = "attention_nc", .min_inputs = 3, .max_inputs = 4},
    {{"n_heads", AttrType::kInt, true}, {"scale", AttrType::kFloat, false}},
    parse_attention_nc_attrs, infer));
const RegisterKernel kCpu("attention_nc", DeviceType::kCPU, run_cpu);
}  // namespace

}  // namespace sampan::ops
