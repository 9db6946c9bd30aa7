// Dequantization of weight rows to bf16, for the large-m paths that hand the product to
// cuBLASLt tensor cores (gemm.cuh): a chunk of rows is expanded into scratch memory, multiplied,
// and the scratch reused for the next chunk, so the full bf16 matrix never exists.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemm.cuh"

namespace sampan::cuda {

// out[r, c] = bf16(w[row0 + r, c]) for r < rows, c < w.k, w block `block` of `w` (kI4 or
// kF8E4M3, dequantized exactly in f32 as in gemm_cpu.h, then rounded to nearest even: relative
// error <= 2^-8). out: [rows, ldo] bf16 (device; ldo even and >= k, 4-byte aligned). With
// 16-byte aligned weights and out, ldo % 8 == 0 and k % 32 == 0 (int4) / k % 16 == 0 (fp8), one
// thread expands 16 bytes of weights with 16-byte loads and stores (the same values).
// Returns the cudaError_t of the launch (cudaErrorInvalidValue for other formats).
int dequant_rows_bf16(const GemmWeights& w, int block, int64_t row0, int64_t rows, void* out,
                      int64_t ldo, cudaStream_t stream);

}  // namespace sampan::cuda
