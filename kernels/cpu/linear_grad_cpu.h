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
// bf16 weights with a dy whose every value is exactly bf16 (bf16 training rounds it) and a
// dense dx (lddx == w.k), on a CPU with AVX512-BF16 and outside GemmPrecision::kF32, run
// instead on matmul_bf16 (conv_cpu.h:
// AMX or vdpbf16ps, W read in place): the same exact products, f32 sums in another order.
// The bias, if any, is ignored (it has no effect on dx). dx must not overlap dy.
void linear_grad_input(int64_t m, const float* dy, int64_t lddy, const GemmWeights& w, float* dx,
                       int64_t lddx, TaskRunner& runner);

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
