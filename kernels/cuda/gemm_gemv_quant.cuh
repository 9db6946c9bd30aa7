// INT4 / FP8 GEMV for decode batches: y[m, n] = x[m, k] · W[n, k]ᵀ (+ bias) with m <= 8 and
// kI4 or kF8E4M3 weights (formats: gemm.cuh). Memory-bound: each weight byte is read once.
//
// INT4 (16-byte aligned weights): two kernels. The first rounds x per (row of x, weight group)
// to x16 = rint(x * (32639 / absmax_g)), s_x = absmax_g / 32639 -- the CPU int4 decode kernels'
// rounding with the same f32 operations, so the same x16 and s_x bits (gemm_quant.h states the
// error: kI4DecodeXError * sum_g absmax_g(x) * sum_{c in g} |w_c|) -- into stream-ordered scratch,
// each 8 values stored in the order {0,2,4,6,1,3,5,7} in which a 32-bit weight word's nibbles
// come out of `w & 0x0f0f0f0f` and `(w >> 4) & 0x0f0f0f0f`, with sum(x16) per 32 elements. The
// GEMV then takes four dp2a (int16 x int8 pairs into int32) per word instead of 8 f32 decodes
// and FMAs: per 32-element chunk the exact integer sum x16 (q + 8) minus (8 + z) sum(x16),
// converted once and scaled by s_w s_x. A warp owns 4 rows and walks k with 2 chunks per row in
// flight; the weights, their scales and zero points and x's group scales and sums are all
// requested before any is used (one memory latency per step, not two). A group holding a NaN or
// an infinity gives NaN outputs, as on the CPU. H200, Llama-3-8B shapes, m = 1: 1.2-1.3x the f32
// kernel below on the large matrices, ~1x on 4096 x 4096 (launch-bound); m = 8: 1.2-1.6x.
//
// FP8 (and INT4 with misaligned weights). A block of 8 warps owns 16 consecutive output rows (2 per warp, so each staged x value
// feeds two rows from registers). k is walked in tiles of 32 chunks: a chunk is the 16 bytes one
// lane loads with a single 128-bit load (32 INT4 or 16 FP8 elements), so a warp reads 512
// contiguous bytes of a row per tile and the tile after next is already in flight while the
// current one is multiplied. The tile of x ([m, tile] f32, zero-padded) sits in shared memory,
// padded by 4 floats per chunk so the lanes' 128-bit reads hit distinct banks. Weights decode to
// exact f32 in registers (INT4: q - zero via the 2^23 trick; FP8: via f16), each chunk's dot
// product is accumulated in f32 and scaled once (an INT4 chunk never straddles a group: groups
// are >= 32 elements and chunks start at multiples of 32), and a warp-shuffle tree finishes.
// Numerics: exact dequantization, f32 x, f32 products and sums.
//
// FP8 with m <= 2 (and x 16-byte aligned, ldx % 4 == 0) runs a split-k variant instead: 8 rows
// per block in two groups, each group's two warps splitting k, every lane with 2 tiles x 4 rows of
// weight loads in flight, x read straight from global memory (no barrier in the k loop), the
// warps' partial sums added in shared memory in a fixed order. On an H200 it streams the weights
// 1.4-2x faster than the kernel above at m = 1. FP8 decodes through the hardware e4m3x2 -> f16x2
// convert (exact: every E4M3 value is an f16).
//
// Alignment. 128-bit loads need the block's base 16-byte aligned, and for FP8 k % 16 == 0 (INT4
// rows are k/2 bytes with k % 32 == 0, always whole chunks). Otherwise a byte-wise variant runs
// (correct, slower); no variant reads past the end of a row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemm.cuh"

namespace sampan::cuda {

// m in 1..kGemvMaxM; w.dtype kI4 or kF8E4M3; x: [m, w.k] row stride ldx; y: [m, w.n()] row stride
// ldy (every block's rows, in block order, + bias). Returns the cudaError_t of the launch
// (cudaErrorInvalidValue for an unsupported format or m).
int quant_gemv(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
               int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
