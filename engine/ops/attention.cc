// attention(q [n_tokens, n_heads*head_dim], k [n_tokens, n_kv_heads*head_dim],
//           v [n_tokens, n_kv_heads*head_dim],
//           k_cache [n_blocks, block_size, n_kv_heads*head_dim] f32 (kv_dtype "f32"), or
//                   [n_blocks, block_size, kv_row_bytes] i8 raw bytes (any other kv_dtype),
//           v_cache the same,
//           positions [n_tokens] i32, seq_ids [n_tokens] i32,
//           block_tables [n_seqs, max_blocks] i32)
//   -> [n_tokens, n_heads*head_dim]
// Attributes: n_heads, n_kv_heads, head_dim, scale, sliding_window (0 = none), kv_dtype
// (cpu::kv_dtype_name spellings, default "f32": the format kv_cache_write stores and attention
// reads, see kernels/cpu/attention_cpu.h).
// Token t belongs to sequence s = seq_ids[t] at position p = positions[t]; position j of s lives in
// physical block block_tables[s][j / block_size], row j % block_size. Side effect: every token's
// K and V are written into the caches first, then each token attends causally (and within the
// sliding window) to positions up to its own of its own sequence. Table entries no token needs
// are never read (-1 by convention).
#include "engine/ops/attention.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/attention_cpu.h"

namespace sampan::ops {
namespace {

AttentionAttrs parse(const graph::Node& node) {
  AttentionAttrs a;
  cpu::AttentionShape& s = a.shape;
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
  const std::string text = node.attrs.get_string("kv_dtype", "f32");
  SAMPAN_CHECK(cpu::parse_kv_dtype(text.c_str(), &a.kv_dtype), ErrorCode::kInvalidArgument,
               "node '{}' (attention): unknown kv_dtype '{}' (f32, bf16, fp8, int8, int4)",
               node.name, text);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const AttentionAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const cpu::AttentionShape& s = a.shape;
  const int64_t q_width = s.n_heads * s.head_dim, kv_width = s.n_kv_heads * s.head_dim;
  for (int i = 0; i < 3; ++i) {
    expect_rank(node, in[static_cast<size_t>(i)], i, 2);
    expect_dtype(node, in[static_cast<size_t>(i)], i, DType::kF32);
  }
  const int64_t t = in[0].shape[0];
  expect_dim(node, in[0], 0, 1, q_width);
  expect_dim(node, in[1], 1, 0, t);
  expect_dim(node, in[1], 1, 1, kv_width);
  expect_dim(node, in[2], 2, 0, t);
  expect_dim(node, in[2], 2, 1, kv_width);
  const cpu::KvDtype kv = a.kv_dtype;
  const int64_t row_bytes = cpu::kv_row_bytes(kv, s.n_kv_heads, s.head_dim);
  for (int i = 3; i < 5; ++i) {
    const TensorDesc& c = in[static_cast<size_t>(i)];
    const char* name = i == 3 ? "k_cache" : "v_cache";
    expect_rank(node, c, i, 3);
    if (kv == cpu::KvDtype::kF32) {
      expect_dtype(node, c, i, DType::kF32);
      expect_dim(node, c, i, 2, kv_width);
      continue;
    }
    SAMPAN_CHECK(c.dtype == DType::kI8, ErrorCode::kInvalidArgument,
                 "node '{}' (attention): input {} ({}) must be i8 raw rows for kv_dtype {}, got {}",
                 node.name, i, name, cpu::kv_dtype_name(kv), dtype_name(c.dtype));
    SAMPAN_CHECK(c.shape[2] == row_bytes, ErrorCode::kInvalidArgument,
                 "node '{}' (attention): input {} ({}) has rows of {} bytes, kv_dtype {} with {} "
                 "KV heads of {} needs {}",
                 node.name, i, name, c.shape[2], cpu::kv_dtype_name(kv), s.n_kv_heads,
                 s.head_dim, row_bytes);
  }
  expect_dim(node, in[4], 4, 0, in[3].shape[0]);
  expect_dim(node, in[4], 4, 1, in[3].shape[1]);
  for (int i = 5; i < 7; ++i) {
    expect_rank(node, in[static_cast<size_t>(i)], i, 1);
    expect_dtype(node, in[static_cast<size_t>(i)], i, DType::kI32);
    expect_dim(node, in[static_cast<size_t>(i)], i, 0, t);
  }
  expect_rank(node, in[7], 7, 2);
  expect_dtype(node, in[7], 7, DType::kI32);
  return {{{t, q_width}, DType::kF32}};
}

// Checks every index the kernels will follow, so that a bad batch from a caller is an error and
// never a stray write into another sequence's blocks. Per sequence it remembers the interval of
// table entries already checked, so a prefill chunk costs O(tokens + blocks), not O(tokens^2).
void check_paged_indices(const graph::Node& node, const cpu::AttentionShape& s,
                         const cpu::PagedKvCache& c, int64_t n_tokens, const int32_t* pos,
                         const int32_t* seq) {
  // Reused across calls: this runs in every layer of every step.
  thread_local std::vector<std::pair<int64_t, int64_t>> checked;
  checked.assign(static_cast<size_t>(c.n_seqs), {0, -1});
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t sid = seq[t], p = pos[t];
    SAMPAN_CHECK(sid >= 0 && sid < c.n_seqs, ErrorCode::kInvalidArgument,
                 "node '{}': token {} has sequence id {}, outside the {} rows of block_tables",
                 node.name, t, sid, c.n_seqs);
    SAMPAN_CHECK(p >= 0 && p / c.block_size < c.max_blocks, ErrorCode::kInvalidArgument,
                 "node '{}': token {} of sequence {} has position {}, outside the {} blocks of "
                 "{} rows its block table holds",
                 node.name, t, sid, p, c.max_blocks, c.block_size);
    const int64_t lo = cpu::attention_first_key(p, s.sliding_window) / c.block_size;
    const int64_t hi = p / c.block_size;
    auto& [a, b] = checked[static_cast<size_t>(sid)];
    const int32_t* row = c.block_tables + sid * c.max_blocks;
    auto check = [&](int64_t from, int64_t to) {
      for (int64_t i = from; i <= to; ++i) {
        SAMPAN_CHECK(row[i] >= 0 && row[i] < c.n_blocks, ErrorCode::kInvalidArgument,
                     "node '{}': token {} of sequence {} (position {}) needs block_tables[{}][{}] "
                     "= {}, outside the {} cache blocks",
                     node.name, t, sid, p, sid, i, row[i], c.n_blocks);
      }
    };
    if (a > b || hi + 1 < a || lo > b + 1) {  // nothing checked yet, or disjoint: start over
      check(lo, hi);
      a = lo;
      b = hi;
    } else {
      check(lo, a - 1);
      check(b + 1, hi);
      a = std::min(a, lo);
      b = std::max(b, hi);
    }
  }
}

void run_cpu(const KernelContext& ctx) {
  const AttentionAttrs& a = ctx.attrs_as<AttentionAttrs>();
  const cpu::AttentionShape& s = a.shape;
  const Tensor& q = ctx.inputs[0];
  const Tensor& k = ctx.inputs[1];
  const Tensor& v = ctx.inputs[2];
  const Tensor& k_cache = ctx.inputs[3];
  const Tensor& v_cache = ctx.inputs[4];
  const Tensor& pos = ctx.inputs[5];
  const Tensor& seq = ctx.inputs[6];
  const Tensor& tables = ctx.inputs[7];
  SAMPAN_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && tables.is_contiguous() &&
                   pos.is_contiguous() && seq.is_contiguous(),
               ErrorCode::kInternal,
               "node '{}': KV caches, positions, seq_ids and block_tables must be contiguous",
               ctx.node.name);
  SAMPAN_CHECK(!k_cache.storage()->read_only() && !v_cache.storage()->read_only(),
               ErrorCode::kInvalidArgument, "node '{}': KV cache is read-only memory",
               ctx.node.name);
  cpu::PagedKvCache cache;
  cache.k = k_cache.raw();
  cache.v = v_cache.raw();
  cache.dtype = a.kv_dtype;
  cache.n_blocks = k_cache.dim(0);
  cache.block_size = k_cache.dim(1);
  cache.block_tables = tables.data<int32_t>();
  cache.n_seqs = tables.dim(0);
  cache.max_blocks = tables.dim(1);
  SAMPAN_CHECK(cache.block_size > 0, ErrorCode::kInvalidArgument,
               "node '{}': KV cache blocks have no rows", ctx.node.name);
  const int64_t n = q.dim(0);
  const int32_t* p = pos.data<int32_t>();
  const int32_t* sid = seq.data<int32_t>();
  check_paged_indices(ctx.node, s, cache, n, p, sid);
  cpu::kv_cache_write(n, s, k.data<float>(), row_stride(k), v.data<float>(), row_stride(v), p,
                      sid, cache);
  const Tensor& out = ctx.outputs[0];
  cpu::attention(n, s, q.data<float>(), row_stride(q), cache, p, sid, out.data<float>(),
                 row_stride(out), ctx.runner);
}

const RegisterOp kSchema(with_attrs<AttentionAttrs>(
    {.name = "attention",
     .min_inputs = 8,
     .max_inputs = 8,
     .has_side_effects = true,
     .written_inputs = {3, 4}},  // k_cache, v_cache
    {{"n_heads", AttrType::kInt},
     {"n_kv_heads", AttrType::kInt},
     {"head_dim", AttrType::kInt},
     {"scale", AttrType::kFloat},
     {"sliding_window", AttrType::kInt, false},
     {"kv_dtype", AttrType::kString, false}},
    parse, infer));
const RegisterKernel kCpu("attention", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
