// Causal multi-head attention with grouped KV heads over a per-sequence KV cache, f32.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

struct AttentionShape {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;        // n_heads % n_kv_heads == 0; query head h uses kv head h / (n_heads / n_kv_heads)
  int64_t head_dim = 0;
  float scale = 1.0f;            // usually 1/sqrt(head_dim)
  int64_t sliding_window = 0;    // 0: none; else a query at position p sees keys at p-window+1 .. p
};

// Stores the new tokens' K and V rows at their positions.
// k, v: [n_tokens, n_kv_heads * head_dim] row strides ldk, ldv. pos: [n_tokens].
// k_cache, v_cache: [capacity, n_kv_heads * head_dim] contiguous; every pos < capacity.
void kv_cache_write(int64_t n_tokens, const AttentionShape& shape, const float* k, int64_t ldk,
                    const float* v, int64_t ldv, const int32_t* pos, float* k_cache,
                    float* v_cache);

// q: [n_tokens, n_heads * head_dim] row stride ldq. pos: [n_tokens]; token t attends to cache
// rows [lo(t), pos[t]] which must already hold K/V (kv_cache_write first).
// out: [n_tokens, n_heads * head_dim] row stride ldo. Softmax in f32 with a running maximum.
// When there are few (token, KV head) pairs for the workers (decode), long key ranges are split
// over workers and merged, so results can differ in the last bits with the runner's width.
void attention(int64_t n_tokens, const AttentionShape& shape, const float* q, int64_t ldq,
               const float* k_cache, const float* v_cache, const int32_t* pos, float* out,
               int64_t ldo, TaskRunner& runner);

}  // namespace sampan::cpu
