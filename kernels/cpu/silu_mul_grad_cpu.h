// SwiGLU backward (y = silu(g) ⊙ u, silu_mul_cpu.h) as templates for float (the graph op) and
// double (the gradient checks). With σ = sigmoid(g):
//   dg = dy ⊙ u ⊙ σ (1 + g (1 - σ)),   du = dy ⊙ g σ.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// The forward, for finite differences. g, u, y: [rows, n] contiguous.
template <class T>
void silu_mul_ref(int64_t rows, int64_t n, const T* g, const T* u, T* y);

// g, u, dy, dg, du: [rows, n], each with its own row stride. float runs the vector rows of
// row_kernels.h (f32 with the vector exp: relative error a few 2^-24 of each term, see
// tests/kernels/test_silu_mul.cc); double computes in double (the gradient checks).
template <class T>
void silu_mul_backward(int64_t rows, int64_t n, const T* g, int64_t ldg, const T* u, int64_t ldu,
                       const T* dy, int64_t lddy, T* dg, int64_t lddg, T* du, int64_t lddu,
                       TaskRunner& runner);

}  // namespace sampan::cpu
