// attention's CUDA kernel; the schema, shape checks and the CPU kernel are in attention.cc, whose
// semantics this mirrors: every token's K and V are written into the paged pools first, then
// each token attends causally (and within the sliding window) to its own sequence's positions up
// to its own. Per step, on the executor's stream, without waiting for the GPU:
//  1. attention_token_flags checks every index each token will follow and marks the tokens that
//     belong to runs of one sequence (prefill chunks) for the tiled kernel;
//  2. kv_write stores the step's K/V rows in the cache format;
//  3. attention_prefill takes the tiled tokens, attention_decode (split-K) all the others.
// A batch may mix prefill chunks and decode tokens in any order, as continuous batching makes it.
//
// Bad indices. The CPU op checks them on the host and throws before writing anything. Here the
// positions, sequence ids and block tables are on the device, and reading them back would stall
// the stream at every layer, so the kernels check them instead: a token with a bad sequence id,
// position or block id is never written or read through (no stray access, nothing of another
// sequence touched) and its output row is NaN; the flags kernel reports it to the executor's
// fault word, so the run ends in Error(kInvalidArgument) naming the node (bad_token_text) once
// the rest of it has completed. Debug builds, whose executor already waits after every node,
// read the flags back at once and throw naming the token (except while a CUDA graph is
// recorded, when nothing has run yet).
//
// Scratch (the flags and the split-K partial results) comes from the per-stream buffer of
// scratch_cuda.h, shared with the other CUDA launchers (small: flags are a byte per token and
// partials exist only for steps of few tokens).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/ops/attention.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/scratch_cuda.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/kv_write.cuh"

namespace sampan::ops {
namespace {

// The CUDA kernels read the CPU's formats byte for byte: both backends take the KV formats and
// their sizes from one definition (kernels/common/kv_format.h); the CUDA tests compare the bytes.

// What a token's kTokenBad* bits mean (also the executor's message for a fault, reason = the
// bits of every bad token of the step together).
std::string bad_token_text(int32_t bits) {
  std::string s;
  auto add = [&](const char* what) { s += s.empty() ? what : std::string(" and ") + what; };
  if (bits & cuda::kTokenBadSeq) add("a sequence id outside block_tables");
  if (bits & cuda::kTokenBadPos) add("a position outside its block table");
  if (bits & cuda::kTokenBadBlock) add("a block id outside the cache");
  return s.empty() ? "bad indices" : "a token with " + s;
}

#ifndef NDEBUG
// Debug builds: reads the flags back and throws like the CPU op for the first bad token.
void throw_on_bad_tokens(const graph::Node& node, const uint8_t* flags, const Tensor& pos,
                         const Tensor& seq, int64_t n, cudaStream_t stream) {
  std::vector<uint8_t> f(static_cast<size_t>(n));
  std::vector<int32_t> p(static_cast<size_t>(n)), s(static_cast<size_t>(n));
  cuda_copy_async(f.data(), flags, f.size(), stream);
  cuda_copy_async(p.data(), pos.raw(), p.size() * sizeof(int32_t), stream);
  cuda_copy_async(s.data(), seq.raw(), s.size() * sizeof(int32_t), stream);
  cuda_stream_synchronize(stream, "attention: reading the token checks");
  for (size_t t = 0; t < f.size(); ++t) {
    if (f[t] & cuda::kTokenValid) continue;
    const char* why = (f[t] & cuda::kTokenBadSeq)   ? "a sequence id outside block_tables"
                      : (f[t] & cuda::kTokenBadPos) ? "a position outside its block table"
                                                    : "a block id outside the cache";
    fail(ErrorCode::kInvalidArgument, "node '{}': token {} (sequence {}, position {}) has {}",
         node.name, t, s[t], p[t], why);
  }
}
#endif

void run_cuda(const KernelContext& ctx) {
  const graph::Node& node = ctx.node;
  const Tensor& q = ctx.inputs[0];        // [n_tokens, n_heads * head_dim]
  const Tensor& k = ctx.inputs[1];        // [n_tokens, n_kv_heads * head_dim]
  const Tensor& v = ctx.inputs[2];        // [n_tokens, n_kv_heads * head_dim]
  const Tensor& k_cache = ctx.inputs[3];  // [n_blocks, block_size, row] f32 or i8 bytes
  const Tensor& v_cache = ctx.inputs[4];  // the same
  const Tensor& pos = ctx.inputs[5];      // [n_tokens] i32
  const Tensor& seq = ctx.inputs[6];      // [n_tokens] i32
  const Tensor& tables = ctx.inputs[7];   // [n_seqs, max_blocks] i32
  const Tensor& out = ctx.outputs[0];     // [n_tokens, n_heads * head_dim]
  const int64_t n = q.dim(0);
  if (n == 0) return;
  SAMPAN_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && tables.is_contiguous() &&
                   pos.is_contiguous() && seq.is_contiguous(),
               ErrorCode::kInternal,
               "node '{}': KV caches, positions, seq_ids and block_tables must be contiguous",
               node.name);
  SAMPAN_CHECK(!k_cache.storage()->read_only() && !v_cache.storage()->read_only(),
               ErrorCode::kInvalidArgument, "node '{}': KV cache is read-only memory", node.name);
  // Parsed and validated when the executor planned (attention.cc).
  const AttentionAttrs& a = ctx.attrs_as<AttentionAttrs>();
  cuda::AttentionBatch b;
  b.n_tokens = n;
  b.pos = pos.data<int32_t>();
  b.seq_ids = seq.data<int32_t>();
  b.n_heads = a.shape.n_heads;
  b.n_kv_heads = a.shape.n_kv_heads;
  b.head_dim = a.shape.head_dim;
  b.scale = a.shape.scale;
  b.sliding_window = a.shape.sliding_window;
  SAMPAN_CHECK(b.head_dim <= 256, ErrorCode::kUnsupported,
               "node '{}': attention on CUDA supports head_dim up to 256, not {}", node.name,
               b.head_dim);
  cuda::PagedKv c;
  c.k = k_cache.raw();
  c.v = v_cache.raw();
  c.format = static_cast<cuda::KvFormat>(a.kv_dtype);
  c.n_blocks = k_cache.dim(0);
  c.block_size = k_cache.dim(1);
  c.block_tables = tables.data<int32_t>();
  c.n_seqs = tables.dim(0);
  c.max_blocks = tables.dim(1);
  SAMPAN_CHECK(c.block_size > 0, ErrorCode::kInvalidArgument,
               "node '{}': KV cache blocks have no rows", node.name);

  // Splits depend on the shape only: the longest range a token of this table can have.
  int64_t max_keys = c.max_blocks * c.block_size;
  if (b.sliding_window > 0 && b.sliding_window < max_keys) max_keys = b.sliding_window;
  const int64_t n_splits = cuda::attention_decode_splits(n, b.n_heads, b.n_kv_heads, max_keys);
  const size_t flag_bytes = scratch_align_up(static_cast<size_t>(n));
  const size_t part_bytes =
      cuda::attention_decode_scratch_bytes(n, b.n_heads, b.head_dim, n_splits);
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  uint8_t* scratch =
      stream_scratch(q.device(), ctx.stream, flag_bytes + part_bytes, ctx.capturing, "attention");
  uint8_t* flags = scratch;

  check_cuda(cuda::attention_token_flags(b, c, flags, cuda::FaultSink{ctx.fault, ctx.fault_tag},
                                         stream),
             "attention: index checks");
  check_cuda(cuda::kv_write(b, k.data<float>(), row_stride(k), v.data<float>(), row_stride(v), c,
                            stream),
             "attention: KV cache write");
  check_cuda(cuda::attention_prefill(b, c, q.data<float>(), row_stride(q), flags,
                                     out.data<float>(), row_stride(out), stream),
             "attention: prefill");
  check_cuda(cuda::attention_decode(b, c, q.data<float>(), row_stride(q), flags, n_splits,
                                    part_bytes ? scratch + flag_bytes : nullptr,
                                    out.data<float>(), row_stride(out), stream),
             "attention: decode");
#ifndef NDEBUG
  if (!ctx.capturing) throw_on_bad_tokens(node, flags, pos, seq, n, stream);
#endif
}

const RegisterKernel kCuda("attention", DeviceType::kCUDA, run_cuda);
const RegisterFaultText kCudaFault("attention", DeviceType::kCUDA, bad_token_text);

}  // namespace
}  // namespace sampan::ops
