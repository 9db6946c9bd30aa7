// Rotary position embedding on the GPU in the HF "rotate_half" (GPT-NeoX) layout: within each
// head the pairs are (i, i + head_dim/2). Same contract and arithmetic as kernels/cpu/rope_cpu.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// x: [n_tokens, n_heads * head_dim] row stride ldx (may be a column slice of a fused QKV
// output); pos: [n_tokens] absolute positions; inv_freq: [head_dim / 2] with scaling already
// applied; y: [n_tokens, n_heads * head_dim] row stride ldy, may equal x when ldy == ldx.
// Angles are pos * inv_freq rounded to f32 (as HF computes them), cos/sin taken in double and
// rounded to f32, then multiplied by attn_factor. head_dim even. Device pointers; queued on
// `stream`. Returns the cudaError_t of the launch (cudaErrorInvalidValue when a size exceeds
// the kernel's int range).
int rope(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const float* x, int64_t ldx,
         const int32_t* pos, const float* inv_freq, float attn_factor, float* y, int64_t ldy,
         cudaStream_t stream);

}  // namespace sampan::cuda
