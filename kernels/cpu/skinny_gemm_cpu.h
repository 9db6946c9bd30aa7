// f32 GEMMs with one tiny dimension (at most kSkinnyMax): the shapes of a LoRA adapter's
// products, x·Aᵀ with A [r, in], dy·B with B [out, r], and the weight gradients dA = dUᵀ·x,
// dB = dyᵀ·U, for ranks r = 1..16. The general kernels lose most of their width there: the
// panel GEMM pads 8 output columns to a 32-64 wide panel and runs one task (nothing for a second
// thread), and linear_grad_weight transposes both operands first. Measured on the 1.1B LoRA
// shape (m = 256, r = 8, k = 2048, Zen 5, 2 threads, operands in cache): x·Aᵀ 0.27 ms,
// dy·B 0.31 ms, dA 0.18 ms, dB 0.36 ms through the general kernels.
//
// Both kernels are AVX2 + FMA (the CPU baseline) and split their work over the runner. Sums run
// in f32 in an order of their own (8 lanes, then a horizontal sum): against the exact sum the
// error is the usual f32 bound, ~k · 2^-24 · Σ|x||w| at worst.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

inline constexpr int64_t kSkinnyMax = 16;

// y[i, j] = Σ_c x[i, c] · w[j, c] (+ bias[j]) for i < m, j < n (n <= kSkinnyMax).
// x: [m, k] rows ldx apart; w: [n, k] rows ldw apart; bias: [n] or null; y: [m, n] rows ldy
// apart. y must not overlap x or w.
void skinny_n_gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                   int64_t ldw, const float* bias, float* y, int64_t ldy, TaskRunner& runner);

// out[r, c] (+)= Σ_i g[i, r] · x[i, c] for r < n (n <= kSkinnyMax), c < k: gᵀ·x, summed over the
// m rows. g: [m, n] rows ldg apart; x: [m, k] rows ldx apart; out: [n, k] rows ldo apart
// (`accumulate` adds into it, else overwrites). out must not overlap g or x.
void skinny_outer_sum(int64_t m, int64_t n, int64_t k, const float* g, int64_t ldg,
                      const float* x, int64_t ldx, float* out, int64_t ldo, bool accumulate,
                      TaskRunner& runner);

}  // namespace sampan::cpu
