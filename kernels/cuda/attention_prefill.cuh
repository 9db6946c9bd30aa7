// Tiled, flash-style attention on the GPU for the tiled tokens of a step (prefill chunks; see
// kTokenTiled in attention_common.cuh): causal, grouped KV heads, sliding window, over the paged
// KV cache in any format, softmax online in f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_common.cuh"

namespace sampan::cuda {

// q: [n_tokens, n_heads * head_dim] row stride ldq (f32). flags: [n_tokens] from
// attention_token_flags. out: [n_tokens, n_heads * head_dim] row stride ldo; only the rows of
// tiled tokens are written (a tiled token with bad indices gets NaN). The cache must already
// hold every key a token attends to (kv_write first). One thread block per (tile of
// kTileTokens tokens, query head); each of the tile's runs attends to keys [min first key,
// max position] of its sequence, every token masked to its own [first key, position], so a
// chunk sees the cached prefix and, causally, itself. head_dim <= 256 (padded to 32, 64, 128 or
// 256); n_heads <= 65535. Device pointers; queued on `stream`. Returns the cudaError_t
// (cudaErrorInvalidValue for an unsupported shape).
int attention_prefill(const AttentionBatch& batch, const PagedKv& cache, const float* q,
                      int64_t ldq, const uint8_t* flags, float* out, int64_t ldo,
                      cudaStream_t stream);

}  // namespace sampan::cuda
