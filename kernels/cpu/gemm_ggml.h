// Internal contract between the GGUF block-type GEMM driver (gemm_ggml_cpu.cc, baseline AVX2
// flags) and its per-instruction-set kernels (gemm_ggml_avx512.cc; gemm_ggml_avx2.cc with
// gemm_ggml_x16_avx2.cc). Callers use cpu::gemm (gemm_cpu.h), which hands weights of dtype kU8
// (GemmWeights::ggml_type a block type, ggml_type.h) to gemm_ggml.
//
// Decode (m < kGgmlPrefillMinM) is memory-bound: a dot kernel takes R weight rows, walks their
// blocks in step (one block of each row at a time; AVX2's Q4_0, Q8_0 and Q6_K kernels take the
// rows one after another), dequantizes each block in registers 32 elements at a time and
// multiplies them with up to max_m rows of x, so every weight byte is read from memory once per
// call for m <= max_m (larger m: further passes over the same R rows, from L1). Every supported
// type has SIMD decoders on both ISAs; nothing is dequantized to memory. Decode of Q4_0, Q8_0,
// Q4_K and Q5_K (AVX-512 and AVX2; on AVX512-VNNI four rows in step with the codes as bytes and
// x16 as two int8 planes, GgmlKernels::dot_vnni, or for m >= 2 against x16 as int16 with the
// codes times their scales formed once for all rows of x, GgmlKernels::dot_vnni_batch) and of Q6_K (the AVX2 kernel at AVX2 and plain
// AVX-512 levels, a zmm kernel on AVX512-VNNI: GgmlKernels::dot_vnni) runs against x
// rounded to 16 bits per 256 elements with integer products (the x16 kernels; the driver
// prepares x once per call, in the layout the table's prep_x16 defines), measured 1.5-2x (Q4_K,
// Q5_K) and 1.05-1.15x (Q4_0, Q8_0, 2 threads, from DRAM) the speed of their exact f32 decoders
// on AVX-512, and on AVX2 (Zen 3, 1 thread, weights in cache, thread CPU time, m = 1) 2.4-2.6x
// (Q4_0, Q6_K) and 2.3-2.5x (Q8_0; gemm_ggml_x16_avx2.cc has the figures). On AVX2 (the avx2
// and avx2_vnni levels) Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K and Q3_K decode against x16 too
// (1.7-2.4x their f32 decoders, Zen 3, m = 1 from DRAM), and on AVX-512 on the same AVX2
// kernels (1.2-2.3x the AVX-512 f32 decoders at m = 1, Emerald Rapids; Q4_1, IQ4_NL and Q2_K keep
// the f32 decoder from kGgmlBatchM rows of x, GgmlKernels::dot_batch); everything else keeps x
// in f32. With
// GemmPrecision::kBf16 on AVX512-VNNI, decode of Q4_K, Q5_K and Q6_K instead
// rounds x to int8 per 256 elements (the x8 kernels, GgmlKernels::dot_x8,
// gemm_ggml_q4k_avx512_vnni.cc and gemm_ggml_kq_avx512_vnni.cc; llama.cpp's Q8_K activations):
// one core, weights in cache, m = 1, 1.2-1.3x (Q4_K, Zen 5) and 1.9-2x (Q6_K, Emerald Rapids)
// the x16 kernels. Below AVX-512 (avx2, avx2_vnni) the same for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
// IQ4_XS (gemm_ggml_x8_avx2.cc): Zen 3, one core, in cache, m = 1, Q4_K 1.3x, Q5_K 1.17x, Q6_K
// 1.45x, Q3_K 1.42x, Q2_K 2.2x, IQ4_XS 1.27x the x16 kernels; on AVX512-VNNI the same AVX2 x8
// kernels for Q2_K, Q3_K and IQ4_XS.
// Prefill (m >= kGgmlPrefillMinM) on CPUs without AMX at AVX512-VNNI or below AVX-512, for Q4_0,
// Q8_0, Q4_K, Q5_K, Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K and Q3_K: integer products in
// int16 pairs (ggml_on_int_prefill below). On
// AMX CPUs (unless GemmPrecision::kF32), every type: gemm_ggml_amx below, the blocks dequantized
// straight into
// the tile panels, rounded to bf16, x rounded to bf16. Otherwise, and for every other type: the
// driver dequantizes a bounded chunk of weight rows in scratch and runs the plain gemm() on it:
// bf16 rows (AVX512-BF16 with kBf16), else exact f32 rows on the FMA panel kernels. Measured
// (TinyLlama shape, prompt 512, 2 threads, Sapphire Rapids VM, alternating runs): Q8_0 / Q4_0 /
// Q4_K_M prefill 126-136 tok/s on the f32 panels, 340-395 with bf16 rows and x split
// (kSplitBf16), 553 (Q4_K_M) with x rounded as well (then still through bf16 chunks in memory
// on AMX; the panel packer gained 1.18-1.33x on Q4_K_M at stop 53, Emerald Rapids VM).
//
// Accuracy (what test_gemm_ggml.cc checks), with w the weights exactly as dequantize_ggml_row
// defines them (ggml_dequant.h) and M = |bias| + sum_c |x_c| |w_c|:
//  - Prefill in bf16 (prefill_in_bf16()): every dequantized weight and x are rounded to bf16
//    (relative 2^-9 each), one f32 accumulator per output: |y - y_exact| <= 2^-7 * M, M below
//    (measured far less). llama.cpp rounds x to 8 bits per 32 (or 256) elements for the same
//    products.
//  - f32 kernels (every type but the x16 ones at decode, and every type at f32 prefill): they form
//    exactly the reference's f32 weights (the decoders repeat its f32 operations in the same
//    order; gemm_ggml_avx*.cc say how) and keep x in f32, so the only error is f32 summation:
//    |y - y_exact| <= (k / 8 + 16) * 2^-24 * M at decode (8- or 16-lane vector partial sums,
//    then a tree) and (k + 16) * 2^-24 * M at prefill (the plain GEMM's panel kernels sum each
//    output in one lane); measured errors are far smaller.
//  - x16 kernels (decode of Q4_0, Q8_0, Q4_K, Q5_K and Q6_K; Q4_1, Q5_0, Q5_1, IQ4_NL,
//    IQ4_XS, Q2_K and Q3_K except where dot_batch takes them): x is rounded to
//    1/65534 of its 256-element block's absmax (1/65278 in the AVX512-VNNI Q4_K / Q5_K kernels
//    and the AVX2 Q2_K one, whose 16 bits are two int8 planes; kGgmlDecodeXError and the full
//    bound below;
//    blocks start at element 0 of the row, a last one of k % 256 elements takes its own
//    absmax), about 1.5e-5 relative: 250x finer than llama.cpp's 8-bit x, the same order as
//    the bf16-split AMX path (2^-16). Q4_0, Q8_0, Q5_0, IQ4_NL, IQ4_XS, Q3_K and Q6_K have no min
//    part (w2 = 0, M' = sum |x||w|: their integer sums already hold (q - offset) x16, or the
//    codebook value times x16, exactly); Q4_1 and Q5_1 split w = d q + m as w1 = d q,
//    w2 = -m, the m part against the prepared 32-element sums s sum x16; Q2_K as the other
//    K-quants with mins (its mn against the prepared 16-element sums of x16, in integers).
//  - x8 kernels (decode of Q4_K, Q5_K and Q6_K with kBf16 on AVX512-VNNI; below AVX-512 also
//    Q2_K, Q3_K and IQ4_XS): the x16 bound with
//    kX8Error (gemm_quant.h: absmax_b / 254 plus f32 roundings) in place of kGgmlDecodeXError,
//    over the same blocks of 256 (the table's x8 flag says which bound a table's kernel keeps).
//  - Bias and the SiLU-mul epilogue add the usual one or two f32 roundings (exp: ~2 ulp).
//  - Non-finite weights (an inf/NaN f16 scale) or x give non-finite outputs where they meet
//    (an x16 block of x holding an inf or NaN makes the whole block's contribution NaN).
#pragma once

#include <cstdint>

#include "kernels/common/ggml_type.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu::gemm_detail {

// From this many rows of x on, block-type GEMMs dequantize chunks of rows to f32 and run the
// plain GEMM (its panel kernels reuse each weight for many rows; the dot kernels take one pass
// over the R rows, from L1, per max_m rows of x). Measured (Zen 4, 1 thread, 2048 x 2048 in
// cache, thread CPU time, GFLOP/s dot / dequantize + GEMM): Q4_0 m = 32: 71 / 71, 64: 71 / 85,
// 128: 67 / 87; Q4_K 57 / 73, 57 / 83, 72 / 88; Q6_K 57 / 66, 53 / 82; Q8_0 79 / 70, 50 / 86;
// at m = 16 the dot kernels ran 80-85 (Q4_0, Q4_K).
constexpr int64_t kGgmlPrefillMinM = 32;

// Largest R and max_m of any table (the driver's buffers are sized with them).
constexpr int kGgmlMaxRows = 4;
constexpr int kGgmlMaxM = 4;

// Number of GgmlType ids the tables index (the largest id + 1).
constexpr int kGgmlTypeSlots = 40;

// For i < mb and r < R: out[i * R + r] = sum over c < k of x[i * ldx + c] * w_r[c], w_r the
// dequantized row (ggml_dequant.h). rows: [R] pointers to rows of k / block_size blocks (any
// alignment); x: [mb, ldx] f32; out: [mb * R]. 1 <= mb <= max_m; k a multiple of the block size.
using GgmlDotFn = void (*)(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                           int mb, float* out);

// row: [ggml_row_bytes(t, k)] bytes -> out: [k] f32, bit-identical to dequantize_ggml_row.
using GgmlDequantFn = void (*)(const uint8_t* row, int64_t k, float* out);

struct GgmlDotTable {
  int rows = 0;   // R: weight rows per call (even: kSiluMul pairs R/2 gate and R/2 up rows)
  int max_m = 0;  // mb <= max_m
  GgmlDotFn dot = nullptr;
  // The kernel reads x prepared by prep_x16 (x then has ldx = x16_floats(k) floats per row)
  // instead of raw f32 x.
  bool x16 = false;
  // For x16 kernels: floats per prepared row and the preparation, x: [k] f32 -> out:
  // [x16_floats(k)] floats of kernel-private layout (64-byte aligned).
  int64_t (*x16_floats)(int64_t k) = nullptr;
  void (*prep_x16)(const float* x, int64_t k, float* out) = nullptr;
  // The preparation rounds x to int8 per 256 elements (the x8 kernels: bound kX8Error,
  // gemm_quant.h, in place of kGgmlDecodeXError) instead of to 16 bits.
  bool x8 = false;
  // Optional: `dot` with its instruction forms chosen for the current ISA level, which the
  // decode driver asks for once per GEMM (as QuantDotTable::resolve: `dot` asks per call of R
  // rows). The same results as `dot`.
  GgmlDotFn (*resolve)() = nullptr;
};

// Relative rounding of x (to its 256-element block's absmax) where a kernel takes prepared x:
// x16 = round(x / s), s = absmax / 32767, is off by s / 2 = absmax / 65534 (s = absmax / 32639
// and absmax / 65278 in gemm_ggml_q4k_avx512_vnni.cc, whose x16 = 256 xh + xl needs |x16| <=
// 127 * 257), plus three f32 roundings (s, 1 / s and x * (1 / s)) under 2^-22 absmax. Such a
// kernel's error is
//   |y - y_exact| <= kGgmlDecodeXError * sum_b absmax_b(x) * sum_{c in b} |w_c|
//                    + (k / 8 + 16) * 2^-24 * M'
// with M' = sum_c |x_c| (|w1_c| + |w2_c|), w = w1 - w2 its split into the (d sc) q and the
// dmin mn parts (the kernel sums them separately). A block of x with absmax below 2^-100 is
// taken as zero: its contribution, at most absmax_b sum_{c in b} |w_c| < 2^-100 sum |w|, is
// dropped (a term outside the bound above; test_gemm_ggml.cc adds it).
constexpr double kGgmlDecodeXError = 1.0 / 65278 + 0x1p-22;

struct GgmlKernels {
  GgmlDotTable dot[kGgmlTypeSlots];         // by GgmlType id; set for every supported type
  // Decode with GemmPrecision::kBf16 (vnni_x8, gemm_quant.h), where set: x rounded to int8 per
  // 256 elements, as llama.cpp rounds its activations (Q8_K) for these types. In the AVX-512
  // table (taken on AVX512-VNNI CPUs) Q4_K, Q5_K and Q6_K (gemm_ggml_kq_avx512_vnni.cc); in the
  // AVX2 one Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS (gemm_ggml_x8_avx2.cc).
  GgmlDotTable dot_x8[kGgmlTypeSlots];
  // Decode at the other precisions on AVX512-VNNI CPUs, where set (in place of dot): Q4_K,
  // Q5_K, Q6_K.
  GgmlDotTable dot_vnni[kGgmlTypeSlots];
  // In place of dot_vnni for m >= 2 rows of x, where set: Q4_K and Q5_K
  // (ggml_q4k_wide_dot_avx512_vnni).
  GgmlDotTable dot_vnni_batch[kGgmlTypeSlots];
  // In place of dot for m >= kGgmlBatchM rows of x, where set: in the AVX-512 table the f32
  // decoders of Q4_1, IQ4_NL and Q2_K (dot has their AVX2 x16 kernels, faster for fewer rows).
  GgmlDotTable dot_batch[kGgmlTypeSlots];
  GgmlDequantFn dequant[kGgmlTypeSlots] = {};  // by GgmlType id; set for every supported type
  EpilogueFn epilogue = nullptr;
};

// Rows of x from which GgmlKernels::dot_batch replaces dot.
constexpr int64_t kGgmlBatchM = 4;

const GgmlKernels& ggml_kernels_avx2();
const GgmlKernels& ggml_kernels_avx512();

// Whether cpu::gemm runs GGUF weights of `type` with m rows of x through
// gemm_ggml_vnni_prefill (gemm_ggml_avx2_prefill at a level without AVX-512): at levels without
// AMX, the types of ggml_i16_prefill_type with AVX512-VNNI or without AVX-512 (as
// i4_on_int_prefill, gemm_quant.h); m >= kGgmlPrefillMinM, GemmPrecision not kF32. x is then
// rounded per group of 32 (Q6_K, Q2_K, Q3_K: 16) elements to x16 = round(x / s), s = absmax /
// 32767: within the x16 kernels' bound
// below (their blocks of 256 hold these groups), with integer products as theirs (types with
// a min, Q4_1, Q5_1, Q2_K, Q4_K, Q5_K: the scale part in integers, the min part against the f32
// sums s * sum x16 of each group, so within the bound with M'). With GemmPrecision::kBf16, x is
// rounded per group to int8 instead, within kX8Error (gemm_quant.h, vnni_x8), as llama.cpp
// rounds its activations, where ggml_prefill_x8(type).
bool ggml_on_int_prefill(GgmlType type, int64_t m);
// Whether that prefill rounds x of `type` to int8: vnni_x8(), except Q8_0, IQ4_NL and IQ4_XS at
// a level without VNNI (avx2), whose unsigned codes up to 255 (q + 128, kv + 128) would saturate
// vpmaddubsw's int16 pair sums: they keep x16 there.
bool ggml_prefill_x8(GgmlType type);
// Prefill on AMX-BF16 tiles (gemm_ggml_amx.cc; AMX CPUs, where prefill_in_bf16()): the rows'
// blocks dequantized by `dequant` straight into gemm_amx's panels and rounded to bf16; x as
// gemm_precision() says (the driver sets kBf16). Any m >= 1.
void gemm_ggml_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                   GgmlDequantFn dequant, GemmEpilogue ep, float* y, int64_t ldy,
                   TaskRunner& runner);
// The types the integer prefill packs (the type half of ggml_on_int_prefill): Q4_0, Q8_0, Q4_K,
// Q5_K, Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K. On AVX512-VNNI the last seven run
// 1.7-2.2x (x16) and 2.0-3.3x (x8, kBf16) the bf16 / f32 chunks they took before (Emerald
// Rapids, 1 thread, bench_gemm_ggml --m 512, 2048 x 2048, alternating).
bool ggml_i16_prefill_type(GgmlType type);
// Any m >= 1 (gemm_prefill_int_avx512_vnni.cc; AVX512-VNNI CPUs only).
void gemm_ggml_vnni_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                            GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner);
// The same on 8-lane vectors (gemm_prefill_int_avx2.cc), at levels without AVX-512.
void gemm_ggml_avx2_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                            GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner);

// The decode kernel gemm_ggml runs for `type` and m rows of x from table kt at the calling
// thread's precision and the current ISA level: kt.dot_x8 where set, with GemmPrecision::kBf16 on
// AVX512-VNNI, else on AVX512-VNNI kt.dot_vnni_batch where set and m >= 2, else kt.dot_vnni where
// set, else kt.dot_batch where set and m >= kGgmlBatchM, otherwise kt.dot.
const GgmlDotTable& ggml_decode_table(const GgmlKernels& kt, GgmlType type, int64_t m);

// The prepared-x layout of the AVX-512 x16 kernels of Q4_K / Q5_K (gemm_ggml_avx512.cc's
// prep_x16), which the AVX512-VNNI Q6_K x16 kernel reads too: per 256-element block
// kGgmlX16BlockFloats floats, the first 128 holding 256 int16 x16 in element order, float
// kGgmlX16ScaleAt the block's s.
constexpr int64_t kGgmlX16BlockFloats = 144;
constexpr int kGgmlX16ScaleAt = 136;
// Q6_K decode against that x16 (a GgmlDotFn; AVX512-VNNI only; gemm_ggml_kq_avx512_vnni.cc).
void ggml_q6k_x16_dot_avx512_vnni(const uint8_t* const* rows, int64_t k, const float* x,
                                  int64_t ldx, int mb, float* out);

// The x8 decode kernel of Q6_K (an empty table for other types; Q4_K and Q5_K:
// ggml_q4k_dot_avx512_vnni), AVX512-VNNI only.
GgmlDotTable ggml_x8_dot_avx512_vnni(GgmlType type);

// The decode kernel of Q4_K or Q5_K (an empty table for other types) that takes four rows of W
// in step with x as two int8 planes of 16-bit x (x8 false: the x16 bound) or as int8 (x8 true:
// kX8Error); AVX512-VNNI only (gemm_ggml_q4k_avx512_vnni.cc).
GgmlDotTable ggml_q4k_dot_avx512_vnni(GgmlType type, bool x8);
// The same four rows in step against x16 as int16 (the x16 bound), the codes times their
// sub-block scales formed once per block for every row of x: for m >= 2 (the same file says
// why not for m = 1).
GgmlDotTable ggml_q4k_wide_dot_avx512_vnni(GgmlType type);

// The AVX2 x16 decode kernel of `type` (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K,
// Q3_K, Q4_K, Q5_K or Q6_K; gemm_ggml_x16_avx2.cc):
// the AVX-512 table takes Q6_K's, faster there than its f32 decoder (figures at make_table).
GgmlDotTable ggml_x16_dot_avx2(GgmlType type);

// cpu::gemm for w.dtype kU8 (same contract; m >= 1; w.ggml_type supported, w.k a multiple of
// its block size: the caller (linear op) checked both).
void gemm_ggml(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
               float* y, int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu::gemm_detail
