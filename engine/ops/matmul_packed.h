// The matmul_packed op (matmul_packed.cc; kernel: kernels/cpu/sgemm_packed_cpu.h) as the pass
// pack_matmul_weights (engine/graph/passes/matmul_passes.h) sees it.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"

namespace sampan::ops {

// The panel width the packed GEMM runs fastest with on this machine's CPU (64 where the
// AVX-512 panels run, else 16).
int matmul_packed_width();

// b [k, n] f32 (or [n, k] with trans_b) -> the packed constant [ceil(n / nr), k, nr] that
// matmul_packed reads.
Tensor pack_matmul_weight(const Tensor& b, bool trans_b, int nr);

}  // namespace sampan::ops
