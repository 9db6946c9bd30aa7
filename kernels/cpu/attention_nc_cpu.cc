// Non-causal multi-head attention (attention_nc_cpu.h): per (batch, head, query block), scores
// on the linear GEMM, a stable softmax in place, and P·V on the GEMM again, written straight
// into the output rows.
#include "kernels/cpu/attention_nc_cpu.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/softmax_cpu.h"

namespace sampan::cpu {
namespace {

struct Scratch {
  std::vector<float> k;       // [seq_k, head_dim]: one head's keys, packed
  std::vector<float> vt;      // [head_dim_v, seq_k]: one head's values, transposed
  std::vector<float> scores;  // [rows, seq_k]
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

GemmWeights f32_weights(const float* w, int64_t n, int64_t k) {
  GemmWeights g;
  g.dtype = DType::kF32;
  g.k = k;
  g.n_blocks = 1;
  g.data[0] = w;
  g.rows[0] = n;
  return g;
}

// Query rows [i0, i1) of head h of batch item b.
void attend_block(const AttnNcShape& sh, const AttnNcRows& q, const AttnNcRows& k,
                  const AttnNcRows& v, const AttnNcMask& mask, float scale, float* out,
                  int64_t out_bs, int64_t out_rs, int64_t b, int64_t h, int64_t i0, int64_t i1) {
  const int64_t sk = sh.seq_k, d = sh.head_dim, dv = sh.head_dim_v, rows = i1 - i0;
  Scratch& s = scratch();
  s.scores.resize(static_cast<size_t>(rows * sk));
  s.vt.resize(static_cast<size_t>(dv * sk));
  float* scores = s.scores.data();
  SerialRunner serial;
  // Scores: q rows (read in place, strided) against this head's keys packed as GEMM rows.
  if (d > 0) {
    s.k.resize(static_cast<size_t>(sk * d));
    const float* kb = k.data + b * k.batch_stride + h * d;
    for (int64_t j = 0; j < sk; ++j) std::copy_n(kb + j * k.row_stride, d, s.k.data() + j * d);
    const float* qb = q.data + b * q.batch_stride + i0 * q.row_stride + h * d;
    gemm(rows, qb, q.row_stride, f32_weights(s.k.data(), sk, d), GemmEpilogue::kStore, scores,
         sk, serial);
  } else {
    std::fill(scores, scores + rows * sk, 0.0f);
  }
  // scale, mask, softmax.
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * sk;
    if (mask.data) {
      const float* m = mask.data + b * mask.sb + h * mask.sh + (i0 + r) * mask.sq;
      if (mask.sk == 1) {
        for (int64_t j = 0; j < sk; ++j) row[j] = row[j] * scale + m[j];
      } else {
        for (int64_t j = 0; j < sk; ++j) row[j] = row[j] * scale + m[j * mask.sk];
      }
    } else {
      for (int64_t j = 0; j < sk; ++j) row[j] *= scale;
    }
  }
  softmax(rows, sk, 1, scores, scores, serial);
  // P·V: vᵀ of this head as GEMM rows; the result goes straight to the output rows.
  const float* vb = v.data + b * v.batch_stride + h * dv;
  for (int64_t j0 = 0; j0 < sk; j0 += 16) {  // tiled transpose
    const int64_t j1 = std::min(sk, j0 + 16);
    for (int64_t c0 = 0; c0 < dv; c0 += 16) {
      const int64_t c1 = std::min(dv, c0 + 16);
      for (int64_t j = j0; j < j1; ++j) {
        const float* vr = vb + j * v.row_stride;
        for (int64_t c = c0; c < c1; ++c) s.vt[static_cast<size_t>(c * sk + j)] = vr[c];
      }
    }
  }
  float* ob = out + b * out_bs + i0 * out_rs + h * dv;
  gemm(rows, scores, sk, f32_weights(s.vt.data(), dv, sk), GemmEpilogue::kStore, ob, out_rs,
       serial);
}

}  // namespace

void attention_nc(const AttnNcShape& sh, const AttnNcRows& q, const AttnNcRows& k,
                  const AttnNcRows& v, const AttnNcMask& mask, float scale, float* out,
                  int64_t out_batch_stride, int64_t out_row_stride, TaskRunner& runner) {
  if (sh.batch <= 0 || sh.seq_q <= 0 || sh.heads <= 0 || sh.head_dim_v <= 0) return;
  if (sh.seq_k <= 0) {  // an empty sum
    for (int64_t b = 0; b < sh.batch; ++b) {
      for (int64_t i = 0; i < sh.seq_q; ++i) {
        std::fill_n(out + b * out_batch_stride + i * out_row_stride, sh.heads * sh.head_dim_v,
                    0.0f);
      }
    }
    return;
  }
  // Blocks of query rows: whole heads when there are enough (batch, head) pairs to keep every
  // worker busy, else smaller blocks (each repacks its head's k and v: O(seq_k · dim), small
  // next to its O(rows · seq_k · dim) products while rows >= 16).
  const int64_t pairs = sh.batch * sh.heads;
  const int64_t want = 4 * static_cast<int64_t>(runner.concurrency());
  int64_t block = sh.seq_q;
  if (runner.concurrency() > 1 && pairs < want) {
    const int64_t per_pair = (want + pairs - 1) / pairs;
    block = std::max<int64_t>(32, (sh.seq_q + per_pair - 1) / per_pair);
    block = std::min(block, sh.seq_q);
  }
  const int64_t n_blocks = (sh.seq_q + block - 1) / block;
  const int64_t tasks = pairs * n_blocks;
  auto task = [&](int64_t t) {
    const int64_t blk = t % n_blocks, bh = t / n_blocks;
    const int64_t b = bh / sh.heads, h = bh % sh.heads;
    const int64_t i0 = blk * block, i1 = std::min(sh.seq_q, i0 + block);
    attend_block(sh, q, k, v, mask, scale, out, out_batch_stride, out_row_stride, b, h, i0, i1);
  };
  if (tasks == 1 || runner.concurrency() <= 1) {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    runner.run(tasks, task);
  }
}

}  // namespace sampan::cpu
