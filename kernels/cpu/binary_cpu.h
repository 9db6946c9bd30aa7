// Element-wise CPU kernels with numpy broadcasting: the `binary` and `where` ops, and the
// bias/activation epilogue of `matmul`. Row-major; inputs are read through per-dimension element
// strides over the output's shape (stride 0 = broadcast), so the op never materialises a
// broadcast copy. The output is contiguous.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

enum class BinaryKind {
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kMod, kFmod,     // arithmetic: f32, i32, i64
  kEqual, kLess, kLessEqual, kGreater, kGreaterEqual,        // -> bool; equal also on bool
  kAnd, kOr, kXor,                                           // bool
};

// True for the kinds whose output is bool.
constexpr bool binary_is_comparison(BinaryKind k) {
  return k == BinaryKind::kEqual || k == BinaryKind::kLess || k == BinaryKind::kLessEqual ||
         k == BinaryKind::kGreater || k == BinaryKind::kGreaterEqual;
}

// Highest rank the strided kernels take (the op refuses higher ranks).
constexpr int kMaxElementwiseRank = 12;

// y[i] = a[i] (kind) b[i] for every index i of `shape` (rank dims, rank <= kMaxElementwiseRank,
// rank 0 = one element). a_strides / b_strides: [rank] element strides into a / b (0 where
// broadcast). dtype: of a and b — kF32, kI32 or kI64 for arithmetic and comparisons, kBool for
// and/or/xor/equal. y: contiguous, dtype for arithmetic, kBool (one byte 0/1) otherwise.
// Semantics: integer add/sub/mul wrap (two's complement); integer div truncates toward zero and
// x / -1 is -x (wrapping, never a trap); mod takes the divisor's sign (numpy, ONNX fmod=0), f32
// too; integer pow with a negative exponent is 1/a^-b truncated (0 unless |a| == 1); f32 max/min
// return a when they compare equal or either is NaN. Integer div/mod by zero is the caller's
// to refuse (it traps): this kernel assumes no zero divisor.
void binary(BinaryKind kind, DType dtype, int rank, const int64_t* shape, const void* a,
            const int64_t* a_strides, const void* b, const int64_t* b_strides, void* y,
            TaskRunner& runner);

// y[i] = cond[i] ? a[i] : b[i] over `shape`, each input read through its strides as in
// binary(). cond is bool (bytes 0/1; any nonzero selects a); a, b and y have elements of
// elem_bytes (1, 2, 4 or 8) bytes; y is contiguous.
void where(int rank, const int64_t* shape, const uint8_t* cond, const int64_t* cond_strides,
           const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
           int elem_bytes, void* y, TaskRunner& runner);

enum class Activation { kNone, kRelu, kGelu, kGeluTanh };

// In place on y [rows, n] (row stride ldy): y = act(alpha * y + bias), bias [n] or null.
// gelu is the erf form 0.5 x (1 + erf(x / sqrt 2)) with erf to ~2e-7 absolute; gelu_tanh
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Both give exactly unary_f32's kGelu /
// kGeluTanh of alpha * y + bias (unary_cpu.h), so fusing an activation into a matmul changes
// no bit of the result.
void bias_activation(int64_t rows, int64_t n, float* y, int64_t ldy, float alpha,
                     const float* bias, Activation act, TaskRunner& runner);
// The same on the calling thread only, for a GEMM's task applying it to a block of outputs it
// has just finished (while they are in cache): the same values, bit for bit.
void bias_activation_rows(int64_t rows, int64_t n, float* y, int64_t ldy, float alpha,
                          const float* bias, Activation act);

}  // namespace sampan::cpu
