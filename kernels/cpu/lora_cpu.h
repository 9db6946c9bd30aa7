// The LoRA delta of many adapters in one batch (multi-adapter serving, engine/ops/lora.cc):
//   y_out[t] = y[t] + s_k · (x[t] · A_kᵀ) · B_kᵀ   with k = ids[t]; ids[t] == -1 copies y[t].
// Adapters are stacked with their ranks zero-padded to r_max, so one tensor holds them all.
// Row-major everywhere.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// y:     [n_tokens, out] row stride ldy (may be a column slice of a wider matrix)
// x:     [n_tokens, in]  row stride ldx
// ids:   [n_tokens] in [-1, n_adapters) (checked by the caller)
// a:     [n_adapters, r_max, in] contiguous
// b:     [n_adapters, out, r_max] contiguous
// scale: [n_adapters]; an adapter of scale 0 is skipped (it does not target this projection)
// y_out: [n_tokens, out] row stride ldo; must not overlap x, may equal y (same stride).
// Tokens are grouped by adapter and each group runs two GEMMs (kernels/cpu/gemm_cpu.h, f32 FMA
// path): its error is f32 summation error of the two products.
void lora_apply(int64_t n_tokens, int64_t in, int64_t out, int64_t n_adapters, int64_t r_max,
                const float* y, int64_t ldy, const float* x, int64_t ldx, const int32_t* ids,
                const float* a, const float* b, const float* scale, float* y_out, int64_t ldo,
                TaskRunner& runner);

}  // namespace sampan::cpu
