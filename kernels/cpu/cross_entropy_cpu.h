// Token-level cross-entropy over logits with an ignore index, summed (not averaged): the loss
// convention of train/lora_trainer.h. Templates for float (the graph ops) and double (the
// gradient checks); every reduction runs in double. float rows take e^x from the kernels' AVX2
// vector exp (~1 ulp, softmax's): a row's loss and each gradient element are then within a few
// f32 ulps of the double formula (double rows: std::exp).
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// Returns Σ over rows with targets[r] != ignore of logsumexp(logits[r]) - logits[r, targets[r]].
// logits: [rows, vocab] row stride ld; targets: [rows], each ignore or in [0, vocab) (the caller
// checks). Row losses are summed in row order, so the result does not depend on the threads.
// row_lse: null, or [rows, 2] that receives each row's logsumexp (a double) as two floats,
// hi = float(lse) and lo = float(lse - hi) (0, 0 on ignored rows), for the backward to reuse.
template <class T>
double cross_entropy_forward(int64_t rows, int64_t vocab, const T* logits, int64_t ld,
                             const int32_t* targets, int32_t ignore, TaskRunner& runner,
                             float* row_lse = nullptr);

// dlogits[r] = dloss · (softmax(logits[r]) - onehot(targets[r])), zero for ignored rows.
// dlogits: [rows, vocab] row stride lddl (may equal logits with the same stride). row_lse: null
// (each row's logsumexp computed here: a max and an exp pass more over the row), or the
// forward's [rows, 2] of the same logits, whose hi + lo is taken as the row's logsumexp.
template <class T>
void cross_entropy_backward(int64_t rows, int64_t vocab, const T* logits, int64_t ld,
                            const int32_t* targets, int32_t ignore, double dloss, T* dlogits,
                            int64_t lddl, TaskRunner& runner, const float* row_lse = nullptr);

}  // namespace sampan::cpu
