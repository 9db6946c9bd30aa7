// y = x · Wᵀ for a linear layer, on the CPU. Row-major everywhere.
//
// W is the virtual concatenation of up to three row blocks that live in separate memory (for
// example q_proj, k_proj and v_proj straight from the mmapped model file): fusing Q/K/V or
// gate/up into one GEMM never copies a weight.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

constexpr int kMaxGemmBlocks = 3;

struct GemmWeights {
  DType dtype = DType::kF32;  // kF32, kF16 or kBF16
  int64_t k = 0;              // reduction length: columns of every block
  int n_blocks = 0;
  const void* data[kMaxGemmBlocks] = {};    // block i: [rows[i], k], row-major, contiguous
  int64_t rows[kMaxGemmBlocks] = {};
  const float* bias[kMaxGemmBlocks] = {};   // block i: [rows[i]] or nullptr

  int64_t n() const {
    int64_t s = 0;
    for (int i = 0; i < n_blocks; ++i) s += rows[i];
    return s;
  }
};

enum class GemmEpilogue {
  // y[m, 0:n()] = x·Wᵀ + bias
  kStore,
  // Needs n_blocks == 2 and rows[0] == rows[1] == F (gate, up). y[m, 0:F] =
  // silu(x·W0ᵀ + b0) * (x·W1ᵀ + b1); the [m, 2F] intermediate is never written.
  kSiluMul,
};

// x: [m, w.k] f32, row stride ldx (elements).
// y: [m, n_out] f32, row stride ldy; n_out = w.n() for kStore, rows[0] for kSiluMul.
// Small m (decode) streams W once at memory speed; large m (prefill) uses AMX tiles for
// bf16/f16 weights when the CPU has them (x is rounded to bf16 there), else AVX-512/AVX2 FMA.
void gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue epilogue,
          float* y, int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu
