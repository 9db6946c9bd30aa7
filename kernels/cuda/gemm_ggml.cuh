// GEMM with GGUF block-quantized weights on the GPU (GemmWeights dtype kU8, ggml_type one of the
// 12 block types of ggml_block_type_supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_NL, IQ4_XS). gemm() (gemm.cuh) dispatches here:
//   m <= kGemvMaxM (decode): ggml_gemv, weights decoded in registers, x in f32;
//   m >  kGemvMaxM (prefill): ggml_dequant_rows_bf16 expands a chunk of rows to bf16 scratch and
//     the chunk is one cuBLASLt bf16 product (gemm.cu's dequant_gemm, shared with int4 / fp8);
//   kSiluMul and bias: as for every format (gemm.cu's epilogue over gemm_store; bias added in the
//     GEMV's final store or by the cuBLASLt epilogue).
//
// Exact: the dequantized weights. Both paths form, in f32, bit for bit the values of
// kernels/cpu/ggml_dequant.h (gemm_ggml_decode.cuh says how), and the embedding lookup
// (embedding.cuh, embedding_ggml) writes exactly those values: the same bits as
// cpu::dequantize_ggml_row.
//
// Error bound, per output y[i][j], with w the exact dequantized weights and
// M = |bias_j| + sum_c |x_ic| |w_jc|:
//   GEMV: f32 FMAs only; each lane sums at most 32 * ceil(k / 1024) <= k / 32 + 31 products in
//     sequence (one 32-element unit of each 1024-element tile), then a 5-level shuffle tree and
//     the bias add:  |y - y_exact| <= (k / 32 + 40) * 2^-24 * M.
//   prefill: x and w are each rounded to bf16 (round to nearest even, relative 2^-8 each), then
//     an f32-accumulating tensor-core GEMM: |y - y_exact| <= (2^-7 + 2^-16) * M plus f32
//     summation error (<= (k + 8) * 2^-24 * M).
//   kSiluMul adds the silu_mul kernel's roundings (expf, one division, one multiply).
//   A non-finite f16 scale (or x) gives non-finite outputs where it meets, as on the CPU.
//
// Alignment: weight rows need only 2-byte alignment (16-bit loads; see gemm_ggml_decode.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/ggml_type.h"
#include "kernels/cuda/gemm.cuh"

namespace sampan::cuda {

// Whether the CUDA kernels run block type t: the 12 above. MXFP4, TQ1_0 and TQ2_0 run on the
// CPU only so far (a CUDA executor refuses them by name).
constexpr bool ggml_cuda_supported(GgmlType t) {
  return ggml_block_type_supported(t) && t != GgmlType::kMXFP4 && t != GgmlType::kTQ1_0 &&
         t != GgmlType::kTQ2_0;
}

// m in 1..kGemvMaxM; w.dtype kU8 with ggml_type supported and w.k a multiple of its block size;
// every data[b] 2-byte aligned. x: [m, w.k] row stride ldx; y: [m, w.n()] row stride ldy (every
// block's rows in block order, + bias). Returns the cudaError_t of the launch
// (cudaErrorInvalidValue for bad arguments).
int ggml_gemv(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
              int64_t ldy, cudaStream_t stream);

// out[r, c] = bf16(w[row0 + r, c]) for r < rows, c < w.k, w block `block` of the kU8 weights `w`
// (dequantized exactly in f32, then rounded to nearest even: relative error <= 2^-8).
// out: [rows, ldo] bf16 (device; ldo even and >= k, 4-byte aligned). Same contract as
// dequant_rows_bf16 (gemm_dequant.cuh), which serves kI4 / kF8E4M3.
int ggml_dequant_rows_bf16(const GemmWeights& w, int block, int64_t row0, int64_t rows, void* out,
                           int64_t ldo, cudaStream_t stream);

}  // namespace sampan::cuda
