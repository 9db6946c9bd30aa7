// Inverted dropout with a scale, for LoRA's input branch: y = x ⊙ keep / (1 - p) · scale.
// The mask is a pure function of (seed, element index): keep[i] = uniform(seed, i) >= p with a
// counter-based hash (splitmix64), so it is the same for every thread count, and the backward
// (the same function applied to dy) regenerates it instead of storing it.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// Whether element `index` is kept under `seed` at drop probability p (0 <= p < 1).
bool dropout_keep(uint64_t seed, uint64_t index, double p);

// x, y: [rows, cols] with row strides ldx, ldy (y may equal x with equal strides). Element
// (r, c) has index r * cols + c. p == 0 keeps everything (a plain scale).
template <class T>
void scaled_dropout(int64_t rows, int64_t cols, const T* x, int64_t ldx, uint64_t seed, double p,
                    double scale, T* y, int64_t ldy, TaskRunner& runner);

namespace detail {
// splitmix64's constants, shared by the scalar, AVX2 and AVX-512 forms of the mask (which must
// agree bit for bit): z = seed + (index + 1) * kSplitmixGolden, then two xor-shift-multiply
// rounds by kSplitmixMul1 and kSplitmixMul2.
constexpr uint64_t kSplitmixGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kSplitmixMul1 = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kSplitmixMul2 = 0x94D049BB133111EBull;

// One row of the f32 kernel on AVX-512 (dropout_avx512.cc; call only where isa.h reports it):
// y[c] = x[c] * kept where element base + c is kept, else 0, for c < cols.
void dropout_row_f32_avx512(const float* x, float* y, int64_t cols, uint64_t seed, uint64_t base,
                            uint64_t threshold, float kept);
}  // namespace detail

}  // namespace sampan::cpu
