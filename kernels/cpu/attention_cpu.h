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

// Element format of the KV cache. Every token row of one cache (K or V) is self-contained:
// kv_row_bytes() bytes holding its n_kv_heads * head_dim values and whatever scales its format
// needs, so the pools keep the [n_blocks, block_size, row] layout for every format.
//  - kF32: the values as f32 (row = kv_dim f32; the pools are f32 tensors).
//  - kBF16: values as bf16 (round to nearest even), no scales.
//  - kF8E4M3: one f32 scale per (token, head) = absmax / 448, values E4M3 of value / scale.
//  - kI8: one f32 scale per (token, head) = absmax / 127, values int8 round(value / scale).
//  - kI4: asymmetric groups of kv_i4_group(head_dim) values per (token, head):
//    an f16 scale and an f16 minimum per group, values 4-bit unsigned u in [0, 15] (two per
//    byte, element 2j in the low nibble), value = min + u * scale.
// The byte layout inside a row is private to the kernels (kv_cache_write writes it, attention
// reads it); callers only size pools with kv_row_bytes().
enum class KvDtype : uint8_t { kF32, kBF16, kF8E4M3, kI8, kI4 };
constexpr int64_t kKvI4Group = 32;
// kKvI4Group when it divides head_dim, else head_dim (one group per head).
constexpr int64_t kv_i4_group(int64_t head_dim) {
  return head_dim % kKvI4Group == 0 ? kKvI4Group : head_dim;
}

// Bytes of one token row of one cache (K or V) of n_kv_heads heads of head_dim values.
int64_t kv_row_bytes(KvDtype dtype, int64_t n_kv_heads, int64_t head_dim);
// "f32" "bf16" "fp8" "int8" "int4".
const char* kv_dtype_name(KvDtype dtype);
// Accepts kv_dtype_name() spellings (and "float32", "bfloat16", "f8_e4m3", "i8", "i4"); false if
// unknown.
bool parse_kv_dtype(const char* text, KvDtype* out);

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
// The work is cut into (token, KV head) ranges; when the batch holds too little work to keep
// every worker busy (a decode of few sequences), long key ranges are split over workers and
// merged, so results can differ in the last bits with the runner's width.
void attention(int64_t n_tokens, const AttentionShape& shape, const float* q, int64_t ldq,
               const PagedKvCache& cache, const int32_t* pos, const int32_t* seq_ids, float* out,
               int64_t ldo, TaskRunner& runner);

}  // namespace sampan::cpu
