// attention(q [n_tokens, n_heads*head_dim], k [n_tokens, n_kv_heads*head_dim],
//           v [n_tokens, n_kv_heads*head_dim], k_cache [capacity, n_kv_heads*head_dim],
//           v_cache [capacity, n_kv_heads*head_dim], positions [n_tokens] i32)
//   -> [n_tokens, n_heads*head_dim]
// Attributes: n_heads, n_kv_heads, head_dim, scale, sliding_window (0 = none).
// Side effect: the new tokens' K and V are written into the caches at their positions first,
// then each token attends causally to cache rows up to its own position.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/attention_cpu.h"

namespace sampan::ops {
namespace {

cpu::AttentionShape shape_of(const graph::Node& node) {
  cpu::AttentionShape s;
  s.n_heads = node.attrs.get_int("n_heads");
  s.n_kv_heads = node.attrs.get_int("n_kv_heads");
  s.head_dim = node.attrs.get_int("head_dim");
  s.scale = static_cast<float>(node.attrs.get_float("scale"));
  s.sliding_window = node.attrs.get_int("sliding_window", 0);
  SAMPAN_CHECK(s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0 &&
                   s.n_heads % s.n_kv_heads == 0 && s.sliding_window >= 0,
               ErrorCode::kInvalidArgument,
               "node '{}' (attention): n_heads {} must be a positive multiple of n_kv_heads {}",
               node.name, s.n_heads, s.n_kv_heads);
  return s;
}

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  const cpu::AttentionShape s = shape_of(node);
  const int64_t q_width = s.n_heads * s.head_dim, kv_width = s.n_kv_heads * s.head_dim;
  for (int i = 0; i < 5; ++i) {
    expect_rank(node, in[static_cast<size_t>(i)], i, 2);
    expect_dtype(node, in[static_cast<size_t>(i)], i, DType::kF32);
  }
  const int64_t t = in[0].shape[0];
  expect_dim(node, in[0], 0, 1, q_width);
  expect_dim(node, in[1], 1, 0, t);
  expect_dim(node, in[1], 1, 1, kv_width);
  expect_dim(node, in[2], 2, 0, t);
  expect_dim(node, in[2], 2, 1, kv_width);
  expect_dim(node, in[3], 3, 1, kv_width);
  expect_dim(node, in[4], 4, 0, in[3].shape[0]);
  expect_dim(node, in[4], 4, 1, kv_width);
  expect_rank(node, in[5], 5, 1);
  expect_dtype(node, in[5], 5, DType::kI32);
  expect_dim(node, in[5], 5, 0, t);
  return {{{t, q_width}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const cpu::AttentionShape s = shape_of(ctx.node);
  const Tensor& q = ctx.inputs[0];
  const Tensor& k = ctx.inputs[1];
  const Tensor& v = ctx.inputs[2];
  const Tensor& k_cache = ctx.inputs[3];
  const Tensor& v_cache = ctx.inputs[4];
  const Tensor& pos = ctx.inputs[5];
  const int64_t capacity = k_cache.dim(0);
  const int32_t* p = pos.data<int32_t>();
  for (int64_t i = 0; i < pos.dim(0); ++i) {
    SAMPAN_CHECK(p[i] >= 0 && p[i] < capacity, ErrorCode::kInvalidArgument,
                 "position {} of token {} is outside the KV cache capacity {}", p[i], i, capacity);
  }
  SAMPAN_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), ErrorCode::kInternal,
               "node '{}': KV cache must be contiguous", ctx.node.name);
  SAMPAN_CHECK(!k_cache.storage()->read_only() && !v_cache.storage()->read_only(),
               ErrorCode::kInvalidArgument, "node '{}': KV cache is read-only memory",
               ctx.node.name);
  cpu::kv_cache_write(q.dim(0), s, k.data<float>(), row_stride(k), v.data<float>(), row_stride(v),
                      p, k_cache.data<float>(), v_cache.data<float>());
  const Tensor& out = ctx.outputs[0];
  cpu::attention(q.dim(0), s, q.data<float>(), row_stride(q), k_cache.data<float>(),
                 v_cache.data<float>(), p, out.data<float>(), row_stride(out), ctx.runner);
}

const RegisterOp kSchema({.name = "attention", .min_inputs = 6, .max_inputs = 6,
                          .has_side_effects = true, .infer = infer});
const RegisterKernel kCpu("attention", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
