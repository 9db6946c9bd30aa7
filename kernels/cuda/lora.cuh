// The LoRA delta of many adapters in one batch on the GPU (multi-adapter serving; the CPU kernel
// and the exact semantics: kernels/cpu/lora_cpu.h, engine/ops/lora.cc):
//   y_out[t] = y[t] + (s_k · (x[t] · A_kᵀ)) · B_kᵀ   with k = ids[t]; ids[t] == -1 (or an adapter
//   of scale 0, which does not target this projection) copies y[t].
// Two kernels, no host work and no synchronisation (CUDA-graph safe):
//  - shrink: one warp per token and slice of `in` (lora_slices: many for few tokens) computes
//    the slice's part of x[t] · A_kᵀ, lanes striding over it (float4 where aligned) with a chunk
//    of up to 64 ranks in registers, so x[t] is read once per chunk; warps of one block take
//    consecutive tokens, which in a batch mostly share an adapter (a prefill chunk is one
//    sequence), so A's rows are served from L1/L2 to all of them.
//  - expand: one thread per output column and 8 consecutive tokens; their h rows (the slices
//    summed in order, times s_k) in shared memory, B_k's row of the column read as float4s
//    where aligned.
// Where the batch is one adapter, this reads A and B about T / 8 times from L2, against the
// CPU's two GEMMs per adapter; gathering tokens by adapter on the device is the next step if
// LoRA prefill shows in a profile.
//
// Error: the CPU's structure (h rounded to f32 and scaled, then the B product, then one add to
// y) with sums in another order: |err| within f32 summation error of the two products,
// ~(in / 32 + 5 + slices) · 2^-24 · Σ|x||a| per h value (lane partials, a shuffle tree, the
// slices) and
// (r + 1) · 2^-24 · (Σ|h||b| + |y|) per output.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/fault.cuh"

namespace sampan::cuda {

// Reason bit lora_apply reports to its FaultSink.
constexpr int32_t kLoraBadAdapter = 1;
// Largest r_max lora_apply takes (the expand's shared memory holds 8 rows of h).
constexpr int64_t kLoraMaxRank = 1024;

// The length of the slices the shrink splits the reduction over `in` into (a multiple of 128
// elements; the last slice may be shorter): few tokens leave most of the GPU idle and one warp
// per token would read an adapter's A (r x in floats) alone, latency-bound, so they split it
// over up to 512 / ceil(T / 8) blocks per token (decode: ~32 warps per projection instead of 1);
// from 4096 tokens on, one slice.
constexpr int64_t lora_slice_len(int64_t n_tokens, int64_t in) {
  const int64_t most = (in + 127) / 128;
  const int64_t token_blocks = (n_tokens + 7) / 8;
  const int64_t want = 512 / token_blocks;
  const int64_t n = want < 1 ? 1 : want > most ? most : want;
  return ((in + n - 1) / n + 127) / 128 * 128;
}
// How many slices (none empty).
constexpr int64_t lora_slices(int64_t n_tokens, int64_t in) {
  const int64_t len = lora_slice_len(n_tokens, in);
  return (in + len - 1) / len;
}

// Scratch lora_apply needs for h: [n_tokens, slices, r_max] f32 partial sums.
inline size_t lora_scratch_bytes(int64_t n_tokens, int64_t in, int64_t r_max) {
  return static_cast<size_t>(n_tokens) * static_cast<size_t>(lora_slices(n_tokens, in)) *
         static_cast<size_t>(r_max) * sizeof(float);
}

// y:     [n_tokens, out] row stride ldy (may be a column slice of a wider matrix)
// x:     [n_tokens, in]  row stride ldx
// ids:   [n_tokens] i32 (device)
// a:     [n_adapters, r_max, in] contiguous
// b:     [n_adapters, out, r_max] contiguous
// scale: [n_adapters] (device)
// h:     scratch of lora_scratch_bytes(n_tokens, in, r_max), 16-byte aligned
// y_out: [n_tokens, out] row stride ldo; may equal y (same stride), must not overlap x.
// An id outside [-1, n_adapters) never reads A or B: its output row is NaN and it is reported to
// `fault` (the CPU op throws before running; checking on the host would cost a synchronisation).
// 1 <= r_max <= kLoraMaxRank. Device pointers; queued on `stream`. Returns the cudaError_t of
// the launches.
int lora_apply(int64_t n_tokens, int64_t in, int64_t out, int64_t n_adapters, int64_t r_max,
               const float* y, int64_t ldy, const float* x, int64_t ldx, const int32_t* ids,
               const float* a, const float* b, const float* scale, float* h, float* y_out,
               int64_t ldo, FaultSink fault, cudaStream_t stream);

}  // namespace sampan::cuda
