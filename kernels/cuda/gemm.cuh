// y = x · Wᵀ (+ bias) on the GPU: the CUDA kernel of the `linear` op. Row-major everywhere.
//
// W is the virtual concatenation of up to three row blocks that live in separate memory (fused
// Q/K/V, fused gate/up), in the weight formats of kernels/common/gemm_weights.h (same numerics
// contract: f32, f16, bf16; kF8E4M3 with one f32 scale per output row; kI4 two per byte, low
// nibble first, q in [-8, 7], f16|bf16 scales per group of 32/64/128 along k, optional int8
// zeros, w = (q - z) * s). Activations and outputs are f32.
//
// Which path runs (m = rows of x):
//   f32, bf16, f16, any m:   cuBLASLt (gemm_cublas.cuh): f32 exact-f32 (no TF32); bf16/f16
//                            after rounding x to the weight type.
//   kI4, m <= kGemvMaxM:     GEMV (gemm_gemv_quant.cuh): x rounded per weight group to int16
//                            exactly as the CPU's int4 decode kernels round it (same bits),
//                            integer dot products (dp2a), f32 accumulation of group sums;
//                            misaligned weights: f32 x, exact decode.
//   kI4, kGemvMaxM < m <= kI4GemvSlicesMaxM: the GEMV per kGemvMaxM rows of x (the same bits
//                            as one call per slice).
//   kI4, larger m:           rows of W dequantized to a bf16 scratch buffer chunk by chunk
//                            (gemm_dequant.cuh), each chunk one cuBLASLt bf16 product.
//   kF8E4M3, m <= kFp8GemvMaxM: GEMV with an exact decode and f32 x, on every GPU.
//   kF8E4M3, larger m:       sm_89+: cuBLASLt FP8 x FP8 (fp8_gemm.cuh: x quantized per row on
//                            the GPU, the row scale, per-row weight scale and bias applied
//                            afterwards); below sm_89, or when cuBLASLt has no FP8 algorithm for
//                            the sizes and alignments (k % 16, 16-byte aligned rows), the GEMV
//                            up to m = kGemvMaxM and the bf16 dequant path above.
//   kU8 (GGUF block types, gemm_ggml.cuh), m <= its GEMV limit: blocks decoded in registers
//                            exactly (f32 x); larger m: rows dequantized to bf16 chunks and the
//                            dequant path's cuBLASLt loop (test_cuda_ggml: every block type
//                            against the CPU's reference dequantization, passing on an H200).
// Accuracy per path (relative to sum_k |x||w| of each output, on top of f32 summation error):
//   exact-f32 paths (f32, FP8 GEMV): none; kI4 GEMV: the CPU decode kernels' x16 rounding,
//   kI4DecodeXError * sum_g absmax_g(x) * sum_{c in g} |w_c| (kernels/cpu/gemm_quant.h);
//   bf16 x: 2^-8; f16 x: 2^-11; dequant path: 2^-7 + 2^-16 (x and w each rounded to bf16);
//   FP8 x FP8: 2^-4, plus 2^-10 * (max_c |x_rc| / 448) * sum_k |w| for elements of row r of x
//   in E4M3's subnormal range.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/gemm_weights.h"
#include "kernels/cuda/gemm_cublas.cuh"

namespace sampan::cuda {

// The weight view and epilogues of kernels/common/gemm_weights.h (device pointers here).
using sampan::GemmEpilogue;
using sampan::GemmWeights;
using sampan::kMaxGemmBlocks;

// Largest m served by the GEMV kernels (decode batches); larger m is compute-bound: tensor cores.
constexpr int64_t kGemvMaxM = 8;
// FP8 weights take the GEMV up to this m only: from m = 3 the FP8 x FP8 tensor-core path (x
// quantized per row) is faster, since the GEMV re-reads x per row pair (H200, Llama-3-8B
// shapes, m = 8: 16-27 us against 32-125 us; decode at batch 8 1,562 against 556 tok/s). At
// m = 2 the GEMV wins on three of the four shapes. Below sm_89 the GEMV serves all m <= 8.
constexpr int64_t kFp8GemvMaxM = 2;
// INT4 weights up to this m run the GEMV once per kGemvMaxM rows, reading the 4-bit weights
// again per slice, which costs less than writing and reading them as bf16 (H200, Llama-3-8B
// shapes: m = 9 1.1-1.8x; m = 16 a tie, so the cut lies between).
constexpr int64_t kI4GemvSlicesMaxM = 12;

// x: [m, w.k] f32, row stride ldx >= k; y: [m, n_out] f32, row stride ldy >= n_out (n_out = n()
// or rows[0] for kSiluMul); x and y must not overlap. Device pointers; everything is queued on
// `stream` (scratch memory comes from a stream-ordered per-device pool, see GemmScratch), so
// the call returns without waiting. m == 0 does nothing.
GemmStatus gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue epilogue,
                float* y, int64_t ldy, cudaStream_t stream);

// How many FP8 products past the GEMV cuBLASLt has refused in this process (each then ran on the
// bf16 dequant path): 0 where the FP8 tensor-core path works. Products ruled out beforehand
// (below sm_89, k % 16 != 0, rows not 16-byte aligned) are not counted. For tests and
// diagnostics: such a refusal once went unnoticed for several sessions.
int64_t fp8_tensor_refusals();

}  // namespace sampan::cuda
