// Stores the step's K and V rows into the paged pools on the GPU, in every cache format, with the
// bytes kernels/cpu/kv_quant.cc writes: the same scale choice, the same rounding (to nearest
// even), the same saturation, zero heads giving zero scales.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_common.cuh"

namespace sampan::cuda {

// k: [n_tokens, n_kv_heads * head_dim] row stride ldk; v the same with ldv (f32). Token t goes to
// sequence batch.seq_ids[t] at position batch.pos[t] of `cache` (both pools). A token whose
// sequence id, position or block id is outside the table or pool is skipped (never a stray
// write; the launcher reports it). Two tokens of a batch must not name the same row. Device
// pointers; queued on `stream`. Returns the cudaError_t of the launch.
int kv_write(const AttentionBatch& batch, const float* k, int64_t ldk, const float* v,
             int64_t ldv, const PagedKv& cache, cudaStream_t stream);

}  // namespace sampan::cuda
