// RoPE backward in the HF rotate_half layout (rope_cpu.h): the rotation of each channel pair
// (i, i + head_dim/2) by angle a, scaled by attn_factor, is orthogonal up to that factor, so its
// transpose rotates by -a: dx1 = f (dy1 cos a + dy2 sin a), dx2 = f (dy2 cos a - dy1 sin a).
// Templates for float (the graph op) and double (the gradient checks); the angle is computed
// exactly as the forward kernel computes it (f32 product pos * inv_freq, cos/sin in double).
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// The forward, for finite differences. x, y: [n_tokens, n_heads * head_dim] contiguous;
// pos: [n_tokens]; inv_freq: [head_dim / 2].
template <class T>
void rope_ref(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* x, const int32_t* pos,
              const float* inv_freq, double attn_factor, T* y);

// dy, dx: [n_tokens, n_heads * head_dim] with row strides lddy, lddx (dx may equal dy when the
// strides match).
template <class T>
void rope_backward(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const T* dy, int64_t lddy,
                   const int32_t* pos, const float* inv_freq, double attn_factor, T* dx,
                   int64_t lddx, TaskRunner& runner);

}  // namespace sampan::cpu
