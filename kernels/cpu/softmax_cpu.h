// Numerically stable softmax on the CPU: exp(x - max) / sum, along one axis.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// x, y: contiguous [outer, n, inner]; softmax along n for every (outer, inner). y may equal x.
// inner == 1 (the last axis) is the fast path: each row in three vector passes (max, exp and
// sum, scale). exp is the kernels' vector exp (~1 ulp), and 0 where x - max < -86.6 (so never
// a denormal, which costs a microcode assist per lane: masked positions are all there); a row
// whose max is -inf or NaN gives NaN, as the formula does.
void softmax(int64_t outer, int64_t n, int64_t inner, const float* x, float* y,
             TaskRunner& runner);

// The sum over i < n of e_i = exp(x[i] - shift), in double, and e_i stored to y[i] where y is
// not null (y may equal x). e_i is the kernels' vector exp (~1 ulp) where x[i] - shift >= -86.6
// (e^-86.6 is about twice f32's smallest normal) and exactly 0 below, so x[i] = -inf gives 0
// and no e_i is denormal (denormals cost a microcode assist per lane). shift must be finite.
// 8-lane AVX2 code on every ISA level: the same bits everywhere. What a sampler's log-sum-exp
// and weights over a vocabulary take (bench/bench_sampler.cc has the figures).
double exp_shifted(int64_t n, const float* x, float shift, float* y);

}  // namespace sampan::cpu
