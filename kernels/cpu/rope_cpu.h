// Rotary position embedding in the HF "rotate_half" layout: within each head the pairs are
// (i, i + head_dim/2), not interleaved.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// x: [n_tokens, n_heads * head_dim] row stride ldx (may be a column slice of a fused QKV output).
// pos: [n_tokens] absolute positions. inv_freq: [head_dim / 2], scaling (linear, llama3, ...)
// already applied by the caller. y: [n_tokens, n_heads * head_dim] row stride ldy; y may equal
// x when ldy == ldx. Angles are pos * inv_freq in f32 (as HF computes them), cos/sin are taken
// accurately and multiplied by attn_factor.
void rope(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const float* x, int64_t ldx,
          const int32_t* pos, const float* inv_freq, float attn_factor, float* y, int64_t ldy,
          TaskRunner& runner);

}  // namespace sampan::cpu
