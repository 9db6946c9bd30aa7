// Split-K attention on the GPU for the decode tokens of a step (every token attention_prefill
// does not take; see kTokenTiled in attention_common.cuh): one query token against its
// sequence's paged KV in any format, the query heads of one KV head together so the KV is read
// once per group, long sequences spread over several thread blocks whose partial results a
// second kernel merges.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_common.cuh"

namespace sampan::cuda {

// A token's key range is cut into at most n_splits equal pieces of at least this many keys: one
// key tile (attention_tile.cuh's kKeyTile), the least a block's loop does. Each tile costs a
// block a dependent global read and two barriers, so a short range left whole is latency-bound:
// with 256 here, a batch-1 decode step of a Llama-3-8B shape at 144 keys ran 8 blocks of 5 tiles
// each, ~47 us per layer under ncu on an H100 (1.5 ms of a 5.2 ms step).
constexpr int64_t kMinSplitKeys = 32;

// Splits for a step of n_tokens tokens whose key ranges hold at most max_keys keys: enough
// thread blocks (tokens x KV heads x splits) for about two per multiprocessor of the current
// device, never pieces shorter than kMinSplitKeys, at most 65535 (gridDim.z). A function of the
// step's shape only (not of the positions, which live on the device). Host only.
int64_t attention_decode_splits(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
                                int64_t max_keys);

// Scratch attention_decode needs for n_splits (0 when n_splits == 1: results go straight out).
size_t attention_decode_scratch_bytes(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                      int64_t n_splits);

// q: [n_tokens, n_heads * head_dim] row stride ldq (f32). flags: [n_tokens] from
// attention_token_flags. scratch: attention_decode_scratch_bytes(...) bytes of device memory
// (16-byte aligned), unused past this call's kernels. out: [n_tokens, n_heads * head_dim] row
// stride ldo; only the rows of tokens without kTokenTiled are written (NaN for a token with bad
// indices). The cache must already hold every key a token attends to (kv_write first).
// head_dim <= 256; n_kv_heads * ceil(group / 64) <= 65535. Device pointers; queued on `stream`.
// Returns the cudaError_t (cudaErrorInvalidValue for an unsupported shape).
int attention_decode(const AttentionBatch& batch, const PagedKv& cache, const float* q,
                     int64_t ldq, const uint8_t* flags, int64_t n_splits, void* scratch,
                     float* out, int64_t ldo, cudaStream_t stream);

}  // namespace sampan::cuda
