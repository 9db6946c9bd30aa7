// f32 GEMM against a constant right-hand side packed once: y = act(alpha · a·B + bias) for the
// `matmul_packed` op (engine/ops/matmul_packed.cc), which the pass pack_matmul_weights makes
// from a matmul by a constant 2-D b (the dense layers of BERT, a classifier's Gemm).
//
// Why a packed form: the per-call paths (the linear GEMM's panels, the conv GEMM's tiles) copy
// the weights into panels on every run, one extra pass over every weight byte per call, and
// apply bias and activation in a second pass over y. Here B is laid out once, at plan time, in
// exactly the panel layout the FMA panel kernels read (gemm_internal.h: k-major rows of NR
// columns), and the epilogue runs on each register tile's rows while they are in L1.
//
// Packed layout, NR = sgemm_packed_nr() (64 where the AVX-512 panels run, else 16):
//   packed [ceil(n / NR), k, NR]: strip s, row kk, lane j = B[kk][s·NR + j], 0 past column n.
// A k-chunk [k0, k0 + kc) of strip s is then one contiguous [kc, NR] panel.
//
// Accuracy: one f32 FMA chain per output in k order (a k-chunk continues from the previous
// chunk's sums), so |error| <= ~k·2^-24 · sum |a||b| at worst; the result does not depend on
// the runner or on m (a row's value is the same whatever rows share the call).
#pragma once

#include <cstdint>

#include "kernels/cpu/binary_cpu.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// The panel width the fastest kernel on this CPU (at the active ISA level) wants.
int sgemm_packed_nr();

// Floats of a packed B of k rows and n columns at width nr: ceil(n / nr) * k * nr.
int64_t sgemm_packed_size(int64_t k, int64_t n, int nr);

// b: [k, n] with row stride ldb (trans = false), or bᵀ given as [n, k] with row stride ldb
// (trans = true); packed: [sgemm_packed_size(k, n, nr)]. nr: a multiple of 16, <= 64.
void sgemm_pack_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool trans, int nr,
                  float* packed, TaskRunner& runner);

// a: [m, k] row stride lda; packed: from sgemm_pack_b at width nr; bias: [n] or null;
// y: [m, n] row stride ldy (must not overlap a or packed). y = act(alpha · a·B + bias), act as
// bias_activation (binary_cpu.h) computes it. Any nr sgemm_pack_b takes runs on any CPU (a
// width that is not the active kernel's is regrouped per chunk, slower); m, n, k >= 1.
void sgemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, int nr, float alpha, const float* bias, Activation act,
                  float* y, int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu
