// Causal multi-head attention with grouped KV heads over a paged, multi-sequence KV cache held in
// f32 or a quantized format (KvDtype).
//
// The cache of one layer is a pool of fixed-size blocks shared by every sequence. A sequence's
// position j lives in physical block block_tables[s][j / block_size] at row j % block_size, so a
// batch may mix prefill chunks of some sequences with single decode tokens of others. A plain
// contiguous per-sequence cache is the special case of one sequence, one block of `capacity`
// rows and block_tables = [[0]].
#pragma once

#include <cstdint>

#include "kernels/common/kv_format.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

struct AttentionShape {
  int64_t n_heads = 0;
  // n_heads % n_kv_heads == 0; query head h uses KV head h / (n_heads / n_kv_heads).
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;            // usually 1/sqrt(head_dim)
  int64_t sliding_window = 0;    // 0: none; else a query at position p sees keys at p-window+1 .. p
};

// The KV-cache formats (KvDtype, kv_row_bytes, ...) are defined once for every backend in
// kernels/common/kv_format.h.
using sampan::KvDtype;
using sampan::kKvI4Group;
using sampan::kv_i4_group;
using sampan::kv_row_bytes;
using sampan::kv_dtype_name;
using sampan::parse_kv_dtype;

// One layer's paged cache. The kernels trust it: seq_ids, positions and every block id a token
// needs must have been checked by the caller (the engine op does).
struct PagedKvCache {
  // [n_blocks, block_size, row] contiguous, row = kv_row_bytes(dtype, ...) bytes (for kF32:
  // n_kv_heads * head_dim f32).
  void* k = nullptr;
  void* v = nullptr;
  KvDtype dtype = KvDtype::kF32;
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  // [n_seqs, max_blocks] row-major. Only the entries a token needs are read (for position p with
  // sliding window w: indices (p-w+1)/block_size .. p/block_size); the rest may hold anything
  // (-1 by convention).
  const int32_t* block_tables = nullptr;
  int64_t n_seqs = 0;
  int64_t max_blocks = 0;
};

// The first key position a query at `pos` attends to.
inline int64_t attention_first_key(int64_t pos, int64_t sliding_window) {
  return sliding_window > 0 && pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
}

// Stores the new tokens' K and V rows: token t goes to sequence seq_ids[t] at position pos[t].
// k, v: [n_tokens, n_kv_heads * head_dim] row strides ldk, ldv. pos, seq_ids: [n_tokens].
void kv_cache_write(int64_t n_tokens, const AttentionShape& shape, const float* k, int64_t ldk,
                    const float* v, int64_t ldv, const int32_t* pos, const int32_t* seq_ids,
                    const PagedKvCache& cache);

// q: [n_tokens, n_heads * head_dim] row stride ldq. pos, seq_ids: [n_tokens]; token t attends to
// positions [lo(t), pos[t]] of sequence seq_ids[t], which must already hold K/V (kv_cache_write
// first, for the whole batch). out: [n_tokens, n_heads * head_dim] row stride ldo; it may be q
// itself (same stride), nothing else overlapping. Softmax in f32 with a running maximum.
// Prefill chunks (attention_prefill_min_tokens) go in blocks of query rows, one task per block
// and KV head; every other token is one task over its key range (every KV head), and when the
// batch holds too little work to keep every worker busy (a decode of few sequences), long key
// ranges are split over workers and merged, so a decode token's result can differ in the last
// bits with the runner's width (a prefill chunk's cannot).
//
// Accuracy: every format computes the attention of the stored (dequantized) K and V in f32
// (softmax with a running maximum, f32 sums), except that with GemmPrecision::kBf16 on CPUs where
// bf16_panels_preferred() the prefill kernel multiplies in bf16 (its bound is stated in
// attention_prefill_avx512_bf16.cc).
void attention(int64_t n_tokens, const AttentionShape& shape, const float* q, int64_t ldq,
               const PagedKvCache& cache, const int32_t* pos, const int32_t* seq_ids, float* out,
               int64_t ldo, TaskRunner& runner);

// The shortest run that attention() hands to its prefill kernel (attention_prefill_impl.h): a
// run is tokens of one sequence at consecutive positions in consecutive batch rows (a prefill
// chunk, as the engine lays batches out). Shorter runs and lone tokens (decode) take the
// per-token loop (every format; INT64_MAX for a shape without KV heads). The
// two kernels sum in different orders, so a token's result may differ in the last bits between
// them; through the prefill kernel it does not depend on how its prompt was cut into chunks
// (key blocks start at fixed positions and every query row is computed on its own).
int64_t attention_prefill_min_tokens(const AttentionShape& shape);

}  // namespace sampan::cpu
