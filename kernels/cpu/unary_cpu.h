// Element-wise f32 functions on the CPU (the unary op, engine/ops/unary.cc, and anything else
// that needs a vector exp/erf/tanh).
//
// Accuracy against the correctly rounded result (f32 inputs, measured in tests/unit/
// test_cnn_ops.cc): exp, sigmoid, silu, tanh within a few ulp (tanh: ~2e-7 absolute near 0.4);
// erf within 2e-7 absolute (a minimax form, ~1 ulp); gelu and gelu_tanh inherit erf's and tanh's
// error. relu, neg, abs, clip, floor, ceil, sqrt and reciprocal are exact (IEEE); log and
// softplus use the C library.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

enum class UnaryKind {
  kRelu,
  kSigmoid,
  kTanh,
  kErf,
  kSqrt,
  kExp,
  kLog,
  kNeg,
  kAbs,
  kReciprocal,
  kGelu,         // 0.5 x (1 + erf(x / sqrt 2))
  kGeluTanh,     // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
  kHardSigmoid,  // max(0, min(1, alpha x + beta))
  kHardSwish,    // x max(0, min(1, x / 6 + 1 / 2))
  kClip,         // min(max(x, min), max)
  kLeakyRelu,    // x < 0 ? alpha x : x
  kSilu,         // x sigmoid(x)
  kSoftplus,     // log(1 + exp(x))
  kFloor,
  kCeil,
};

struct UnaryParams {
  UnaryKind kind = UnaryKind::kRelu;
  float alpha = 0.0f;  // hard_sigmoid, leaky_relu
  float beta = 0.0f;   // hard_sigmoid
  float min = 0.0f;    // clip
  float max = 0.0f;
};

// x, y: [n] (y may alias x). Work is split in contiguous chunks over runner.
void unary_f32(const UnaryParams& p, const float* x, float* y, int64_t n, TaskRunner& runner);

}  // namespace sampan::cpu
