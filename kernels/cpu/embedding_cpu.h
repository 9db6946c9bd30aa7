// Token embedding lookup: rows of a [vocab, dim] table converted to f32.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// ids: [n_tokens], every id in [0, vocab) (the caller validates). table: [vocab, dim] of
// table_type (kF32, kF16 or kBF16). y: [n_tokens, dim] f32, row stride ldy.
void embedding(int64_t n_tokens, const int32_t* ids, const void* table, DType table_type,
               int64_t vocab, int64_t dim, float* y, int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu
