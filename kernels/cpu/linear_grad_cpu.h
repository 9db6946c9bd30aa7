// Gradients of a linear layer y = x · Wᵀ (gemm_cpu.h) for training: the input gradient
// dx = dy · W for frozen weights of any format the forward GEMM takes, and the weight gradient
// dW = dyᵀ · x for trained (f32) weights such as LoRA's A and B. Row-major, strides in elements.
//
// The f32 entry points run on the fast GEMM (gemm_cpu.h); the *_ref templates are the readable
// specification (naive loops) instantiated for float and double, which the gradient checks use.
#pragma once

#include <cstdint>

#include "kernels/common/gemm_weights.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// dx[m, w.k] (row stride lddx) = dy[m, w.n()] (row stride lddy) · W, W the virtual
// concatenation of w's blocks. Every format of gemm_cpu.h: f32/f16/bf16 rows are converted
// exactly; fp8 / int4 / GGUF rows are dequantized exactly as the forward GEMM defines them. W is
// taken a panel of output rows at a time (dequantized, transposed into per-call scratch of
// about 2 * 256 * k floats) and multiplied on the f32 GEMM, so nothing weight-sized is kept.
// bf16 weights read in place instead, outside GemmPrecision::kF32: on AMX CPUs through
// gemm_amx_wt (gemm_internal.h; dy at kBf16 when every value is exactly bf16, as bf16 training
// rounds it, else at the caller's precision); on AVX512-BF16 CPUs where the vdpbf16ps tile wins,
// for an exactly-bf16 dy and a dense dx (lddx == w.k), on matmul_bf16 (conv_cpu.h). The same
// exact products, f32 sums in another order.
// round_dy: the product of bf16(dy) (nearest even) instead of dy, bit for bit what rounding dy
// first (round_bf16_cpu.h) and passing that gives; on AMX with bf16 weights it costs nothing
// (the tiles' packing rounds), elsewhere one rounded copy of dy. round_dx: dx rounded to bf16
// likewise, bit for bit round_bf16 after the call; on AMX with bf16 weights as the tiles are
// stored, elsewhere one pass over dx in place.
// The bias, if any, is ignored (it has no effect on dx). dx must not overlap dy.
void linear_grad_input(int64_t m, const float* dy, int64_t lddy, const GemmWeights& w, float* dx,
                       int64_t lddx, TaskRunner& runner, bool round_dy = false,
                       bool round_dx = false);

// dw[n, k] (+)= dy[m, n]ᵀ · x[m, k]; `accumulate` adds into dw instead of overwriting it.
// Both operands are transposed into scratch ([n, m] and [k, m] floats) and multiplied on the
// f32 GEMM.
void linear_grad_weight(int64_t m, int64_t n, int64_t k, const float* dy, int64_t lddy,
                        const float* x, int64_t ldx, float* dw, bool accumulate,
                        TaskRunner& runner);

// The specification: dx[m, k] = dy[m, n] · w[n, k]; w dense row-major.
template <class T>
void linear_grad_input_ref(int64_t m, int64_t n, int64_t k, const T* dy, const T* w, T* dx);
// dw[n, k] = dy[m, n]ᵀ · x[m, k].
template <class T>
void linear_grad_weight_ref(int64_t m, int64_t n, int64_t k, const T* dy, const T* x, T* dw);
// y[m, n] = x[m, k] · w[n, k]ᵀ (the forward, for finite differences).
template <class T>
void linear_forward_ref(int64_t m, int64_t n, int64_t k, const T* x, const T* w, T* y);

}  // namespace sampan::cpu
