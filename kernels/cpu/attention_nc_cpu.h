// Non-causal multi-head attention on the CPU (the attention_nc op, engine/ops/attention_nc.h):
// every query attends to every key, with an optional additive mask, as in a BERT-style encoder.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// One tensor of [batch, seq, heads · head_dim] rows: element (b, s, h·dim + d) lives at
// data[b·batch_stride + s·row_stride + h·dim + d]. Rows may be wider than heads·dim (a view of
// one fused QKV output).
struct AttnNcRows {
  const float* data = nullptr;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
};

struct AttnNcMask {
  // Additive f32 mask read as [batch, heads, seq_q, seq_k]: element (b, h, i, j) at
  // data[b·sb + h·sh + i·sq + j·sk]; a stride of 0 broadcasts that dimension. Null: no mask.
  const float* data = nullptr;
  int64_t sb = 0, sh = 0, sq = 0, sk = 0;
};

struct AttnNcShape {
  int64_t batch = 0, seq_q = 0, seq_k = 0, heads = 0;
  int64_t head_dim = 0;    // of q and k
  int64_t head_dim_v = 0;  // of v and the output
};

// out (b, i, h·dv + d) = Σ_j p(b,h,i,j) · v(b, j, h·dv + d), with
// p(b,h,i,·) = softmax_j(scale · q(b,i,h)·k(b,j,h) + mask(b,h,i,j)).
// out: [batch, seq_q, heads · head_dim_v], rows of out_row_stride, batches of
// out_batch_stride; must not overlap the inputs. Work is split over (batch, head, block of
// query rows) tasks; each computes its scores with the linear GEMM (kernels/cpu/gemm_cpu.h)
// into per-thread scratch, the softmax in place (max subtracted: stable; a row whose scores
// are all -inf gives NaN like the formula), then P·V straight into out. Neither q, k nor v is
// ever transposed as a whole: only one head's k rows (packed) and vᵀ are copied, per task.
// seq_k == 0 writes zeros.
void attention_nc(const AttnNcShape& shape, const AttnNcRows& q, const AttnNcRows& k,
                  const AttnNcRows& v, const AttnNcMask& mask, float scale, float* out,
                  int64_t out_batch_stride, int64_t out_row_stride, TaskRunner& runner);

}  // namespace sampan::cpu
