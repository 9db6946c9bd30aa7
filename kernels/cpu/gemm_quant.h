// Internal contract between the quantized-weight GEMM driver (gemm_quant_cpu.cc, baseline AVX2
// flags) and its per-instruction-set kernels (gemm_quant_avx512.cc, gemm_quant_avx512_vnni.cc,
// gemm_quant_avx2.cc, gemm_quant_i4x8_avx2.cc, gemm_quant_batch_avx2.cc). Callers use cpu::gemm
// (gemm_cpu.h), which hands kF8E4M3 and kI4 weights to gemm_quant.
//
// Decode (decode_kernels_take: m < kQuantPrefillMinM, and m = 16 but for int4 under kF32; fp8
// below kF8DecodeBelowM on AVX512-VNNI CPUs whose fp8 prefill would run the f32 panels) is
// memory-bound: dot kernels take R weight rows at a time, one from each of R streams of the
// worker's columns (gemm_decode_walk.h), dequantize them in registers and multiply them with up
// to max_m rows of x, so every packed weight byte and scale is read from memory once per call
// (m-groups beyond max_m reuse the R rows from L1). On AMX CPUs batched decode runs on the
// tiles instead (the integer-dot kernels run out of arithmetic at m = 4..8 on a core, the tiles
// do not): fp8 dequantized 16 rows at a
// time into a bf16 tile panel in L1 under gemm_amx's tile loop (quant_on_amx_tiles), int4 as
// unsigned bytes into an INT8 tile panel against x rounded to x16 (i4_on_amx_int8). Without
// AVX512-VNNI, m = 3..16 runs the AVX2 batched kernels (quant_on_avx2_batch): 16 weight rows per
// call, k in chunks outermost so that a chunk of x stays in L1 for all of them, 12 (fp8) or up to
// 8 x 4 (int4) sums in registers. Prefill
// (m >= kQuantPrefillMinM) is compute-bound: the driver dequantizes a
// bounded chunk of weight rows into scratch (bf16 where cpu::gemm multiplies in bf16: AMX, or
// AVX512-BF16 CPUs with GemmPrecision::kBf16; f32 otherwise) and runs the plain GEMM on it, so
// the existing AMX / bf16-panel / FMA-panel machinery does the arithmetic. Except int4 on
// CPUs without AMX (i4_on_int_prefill: AVX512-VNNI, and every level without AVX-512): there
// vpdpwssd multiplies the int16 q - z with x rounded per group to x16 (the decode rounding), 32
// products per instruction against an FMA's 16, or with GemmPrecision::kBf16 vpdpbusd the bytes
// q + 8 with x rounded to int8, 64 per instruction (vnni_x8; gemm_prefill_int_avx512_vnni.cc),
// on AVX2 the 8-lane forms (gemm_prefill_int_avx2.cc: VEX VNNI, or vpmaddwd / vpmaddubsw).
//
// Accuracy, against dequantize-then-multiply in double (tests/kernels/test_gemm_quant.cc), with
// M = sum_k |x| (|q| + |z|) |s| (= sum |x||w| for fp8 and symmetric int4):
//  - kF8E4M3 decode on every ISA, and prefill elsewhere (no AMX, and AVX512-BF16 with the
//    default kSplitBf16): (q - z) * s
//    (at most 9 x 11 significant bits) and fp8 values (4 bits) are exact in f32, the fp8 row
//    scale is applied once to the finished sum, and x stays f32: only f32 summation error, below
//    1e-5 * M for k up to a few thousand. (The AVX2 one-row and AVX512-VNNI fp8 decode kernels
//    keep this for |x| < 2^64.) Whatever the codes: E4M3 subnormals, which the one-row and VNNI
//    kernels' decode makes f32 denormals, are taken apart before the FMAs (an assist each on
//    Intel cores) and their products added exactly; the AVX2 batched kernel decodes through F16C,
//    where they come out normal.
//  - kI4 decode (the AVX2 kernels: one-row at m = 1..2 and batched at m = 3..16 below
//    AVX512-VNNI, and the one-row kernel at m = 1 on Zen 4; the VNNI kernel from AVX512-VNNI up,
//    the AMX-INT8 kernel for m = kI4AmxMinM..16 on AMX CPUs: gemm_quant_cpu.cc), and kI4 prefill
//    on CPUs without AMX where i4_on_int_prefill (unless GemmPrecision is kF32),
//    multiplies in integers: x is rounded per (row of x, weight group g) to
//    x16 * s_x, x16 = round(x / s_x) in [-32639, 32639], s_x = absmax_g(x) / 32639 (32639 =
//    256 * 127 + 127, the most a signed hi byte and lo byte hold). Rounding x to the nearest
//    multiple of s_x is off by s_x / 2 = absmax_g / 65278; computing x / s_x and s_x in f32 adds
//    three roundings of 2^-24 relative (x * fl(1 / s_x) and s_x itself), under 2^-22 absmax_g. So
//      |y - y_exact| <= kI4DecodeXError * sum_g absmax_g(x) * sum_{c in g} |w_c|  +  1e-5 * M
//    where the second term is the f32 summation of exact integer group sums (see the kernel),
//    for groups with absmax_g(x) >= 2^-111 (s_x a normal f32; smaller ones round to 0 or less
//    precisely). A group of x holding a NaN or an infinity gives NaN outputs. The AVX2 one-row
//    and batched kernels give the same bits for a row of x, however many rows share the call
//    (gemm_quant_batch_avx2.cc says how): below AVX512-VNNI, int4 decode is batch-invariant.
//    With GemmPrecision::kBf16 every kI4 decode kernel but AMX-INT8's rounds x to int8 instead
//    (i4_decode_x8, bound kX8Error below; the AVX2 x8 kernels in gemm_quant_i4x8_avx2.cc and
//    gemm_quant_batch_avx2.cc, batch-invariant too).
//  - kF8E4M3 on AMX tiles (quant_on_amx_tiles: from kF8AmxMinM; precision not kF32;
//    gemm_quant_f8_amx.cc): x = hi + lo in bf16 (2^-16; kBf16: x rounded to bf16, 2^-8); the
//    fp8 values are exact in bf16, the row scale applied in f32. Below 2^-16 * M plus f32
//    summation (1e-5 * M); with kBf16 2^-7 * M.
//  - Prefill on AMX, or on AVX512-BF16 CPUs with kBf16: the dequantized weights are rounded to
//    bf16 (2^-8 relative) and x kept to 2^-16 (GemmPrecision::kSplitBf16, AMX only) or 2^-8
//    (kBf16): below 2^-8 * M (+ 2^-16) with the default on AMX, below 2^-7 * M with kBf16. As
//    for f16 weights, SAMPAN_CPU_ISA=avx512 keeps every m exact in f32.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/dtype.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/denormal_mode.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu::gemm_detail {

// From this many rows of x on, quantized GEMMs dequantize chunks of rows and run the plain GEMM.
// Below it the register-dequantizing dot kernels stream the weights; they take m / max_m passes
// over each row (from L1), so their GFLOP/s stop growing past m = 4..8. Measured (1 thread, CPU
// time, 1024x2048, AMX CPU): int4 dot 95 GFLOP/s at m = 12 and 15, dequantize + AMX 104 at m = 16
// (~80 extrapolated to m = 12); fp8 dot 70 at m = 12, dequantize + AMX 108 at m = 16. Without
// AMX a decode step of 16 sequences through the dequantizing path cost 6-22x one sequence's step
// (bench/bench_cpu_isa.py, Zen 4); 32 here measured 4.8x (fp8) / 7.4x (int4) but moves m = 16..31
// onto the int4 kernels that round x per group, which the LoRA trainer's exactness test against
// a dequantized twin (test_lora_trainer) does not allow: left at 16 until that is settled. (The
// AVX2 batched kernels take m = 16 too, int4 only when GemmPrecision is not kF32: on Zen 3 the
// dequantizing path ran a 16-row decode step at 27.7x one row's, int4.)
constexpr int64_t kQuantPrefillMinM = 16;
// fp8 on AVX512-VNNI CPUs whose fp8 prefill would run the f32 panels (no AMX, GemmPrecision not
// kBf16) stays on the decode kernels below this many rows of x: each m-group re-reads the rows
// it decodes from L1, where the prefill path converts every weight to f32 and packs it again.
constexpr int64_t kF8DecodeBelowM = 48;

// Relative rounding of x (to its group's absmax) on the kI4 decode path: 1/65278 + 2^-22.
constexpr double kI4DecodeXError = 1.0 / 65278 + 0x1p-22;
// The x16 range of the kI4 decode path: 256 * 127 + 127, the most a signed hi byte and lo byte
// hold.
constexpr int kI4XMax = 32639;

// One weight row of a quantized block.
struct QuantRow {
  const uint8_t* data = nullptr;  // kI4: [k / 2] bytes; kF8E4M3: [k] bytes
  const void* scales = nullptr;   // kI4: [k / group] f16 or bf16; kF8E4M3: [1] f32 (any 2-byte alignment)
  const int8_t* zeros = nullptr;  // kI4 asymmetric: [k / group]; else null
};

// Shape of the quantized rows of one call.
struct QuantFormat {
  DType dtype = DType::kI4;  // kI4 or kF8E4M3
  int64_t k = 0;
  int64_t group = 0;          // kI4 only: 32, 64 or 128
  bool bf16_scales = false;   // kI4 only: scales are bf16 (else f16)
  bool asymmetric = false;    // kI4 only: zeros present
};

// The rows of x a dot kernel multiplies, already in the layout the kernel table asks for.
struct QuantX {
  int mb = 0;                 // rows of x, 1..max_m of the format's table entry
  const float* x = nullptr;   // [mb, ldx]: prepared x (prep_i4, prep_f8), else raw f32 x
  int64_t ldx = 0;            // floats
};

// out[i * R + r] = sum over c < k of x[i][c] * w_r[c] for i < x.mb and the R rows, with w the
// dequantized weight of QuantRow r (exactly as gemm_cpu.h defines it). rows: [R].
using QuantDotFn = void (*)(const QuantRow* rows, const QuantFormat& f, const QuantX& x,
                            float* out);

// Dequantizes one row to f32 (exact: (q - z) * s and fp8 * scale are representable in f32 to
// within one f32 rounding) or to bf16 (rounded to nearest even). out: [f.k].
using DequantF32Fn = void (*)(const QuantRow& row, const QuantFormat& f, float* out);
using DequantBf16Fn = void (*)(const QuantRow& row, const QuantFormat& f, uint16_t* out);

// The AVX2 and AVX512-VNNI fp8 kernels read E4M3 subnormals as f32 denormals, so they clear a
// caller's FTZ / DAZ for their call (DenormalsKept, denormal_mode.h).

// The f32 scale of an fp8 row; scales need only 2-byte alignment, like the weights.
inline float row_scale(const void* p) {
  float s;
  std::memcpy(&s, p, 4);
  return s;
}

// Lanes 0..n-1 of a 16-lane mask (all for n >= 16, none for n <= 0).
inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Lanes 0..n-1 of a 64-lane mask (all for n >= 64, none for n <= 0): a short last step's loads.
inline __mmask64 mask64(int64_t n) {
  return n >= 64 ? ~__mmask64(0) : n <= 0 ? __mmask64(0) : (__mmask64(1) << n) - 1;
}

// Prefetches the kI4 scales (and zero points) of the row two on in each of the n rows' streams:
// a call's next rows are the next ones in memory of each stream (gemm_decode_walk.h), the scales
// lie in arrays of their own that the kernels' prefetch of the weight rows never reaches, and a
// kernel needs a row's first scales before its first products. Without it the INT4 decode
// kernels waited on a DRAM miss per call (Zen 5, TinyLlama shape, 1 thread, alternating:
// decode 54-59 -> 62-64 tok/s at group 128, 46-48 -> 59-61 at group 32). The decode driver
// (gemm_quant_cpu.cc) calls it before each kernel call on kI4 rows, whatever the ISA level, with
// ng = k / group (the scales and zero points per row) computed once per GEMM (a 64-bit division
// per call showed in the decode walk's profile: perf, int4 g32 m = 1, Zen 3).
// Addresses past an array's end are only prefetched (prefetch.h: why not _mm_prefetch in this
// loop).
inline void prefetch_i4_scales(const QuantRow* rows, int n, int64_t ng) {
  for (int r = 0; r < n; ++r) {
    const uintptr_t sc = reinterpret_cast<uintptr_t>(rows[r].scales) + 2 * 2 * ng;
    for (int64_t off = 0; off < 2 * ng; off += 64) prefetch_t0(sc + off);
    if (rows[r].zeros != nullptr) {
      const uintptr_t z = reinterpret_cast<uintptr_t>(rows[r].zeros) + 2 * ng;
      for (int64_t off = 0; off < ng; off += 64) prefetch_t0(z + off);
    }
  }
}

struct QuantDotTable {
  int rows = 0;   // R
  int max_m = 0;  // QuantX::mb <= max_m
  QuantDotFn dot = nullptr;
  // Optional: the dot specialised for a format (group, zero points, instruction forms), which
  // the decode driver asks for once per GEMM and calls instead of `dot` (whose per-call dispatch
  // asks the ISA level through out-of-line calls; with prefetch_i4_scales' division hoisted as
  // well, int4 g32 GEMV 1.03x at m = 1, Zen 3). Gives the same results as `dot`.
  QuantDotFn (*resolve)(const QuantFormat& f) = nullptr;
};

struct QuantKernels {
  QuantDotTable i4;
  QuantDotTable f8;
  // Floats per row of prepared kI4 x (prep_i4 writes that many, zero-padded).
  int64_t (*i4_x_floats)(int64_t k, int64_t group) = nullptr;
  // x: [k] f32 -> out: [i4_x_floats(k, group)] floats of kernel-private layout.
  void (*prep_i4)(const float* x, int64_t k, int64_t group, float* out) = nullptr;
  // The same for kF8E4M3; null where the fp8 dot kernel reads raw f32 x.
  int64_t (*f8_x_floats)(int64_t k) = nullptr;
  // x: [k] f32 -> out: [f8_x_floats(k)] floats of kernel-private layout.
  void (*prep_f8)(const float* x, int64_t k, float* out) = nullptr;
  DequantF32Fn dequant_f32 = nullptr;
  DequantBf16Fn dequant_bf16 = nullptr;  // null where the ISA has no bf16 conversion
  EpilogueFn epilogue = nullptr;
};

const QuantKernels& quant_kernels_avx2();
// Whether the AVX2 one-row kF8E4M3 kernel takes blocks holding E4M3 subnormal codes apart
// (f8_take_subnormals: codes zeroed, their products added in double) instead of multiplying
// them as f32 denormals: kAuto where FMAs on denormals cost an assist
// (CpuFeatures::denormal_assist); kOn / kOff let tests cover both forms on any CPU. Both are
// exact products summed in f32 (the decode bound either way).
enum class F8SubnormalSplit { kAuto, kOn, kOff };
void set_f8_subnormal_split(F8SubnormalSplit p);
bool f8_split_subnormals();
// The AVX2 table with batched-decode dot kernels (gemm_quant_batch_avx2.cc: 2 weight rows by
// up to kAvx2BatchMaxM rows of x per call, k-chunked): for m = kAvx2BatchMinM.. where the
// AVX2 table would otherwise serve batched decode (no AVX512-VNNI, no AMX).
const QuantKernels& quant_kernels_avx2_batch();
// The AVX2 table and the batched one with the x8 kI4 decode kernels (x rounded to int8 per
// group, where vnni_x8(): gemm_quant_i4x8_avx2.cc, and the x8 passes of
// gemm_quant_batch_avx2.cc; one prepared x for both, so below AVX512-VNNI int4 decode stays
// batch-invariant under kBf16 too).
const QuantKernels& quant_kernels_avx2_x8();
const QuantKernels& quant_kernels_avx2_batch_x8();
constexpr int64_t kAvx2BatchMinM = 3;
constexpr int64_t kAvx2BatchMaxM = 16;
// Whether m rows of x take the decode kernels (weights read once per call, dequantized in
// registers) rather than the prefill path (dequantized chunks and the plain GEMM) where no tile
// path takes them: m < kQuantPrefillMinM, and m = kQuantPrefillMinM for kF8E4M3 (exact either
// way) and for kI4 unless GemmPrecision is kF32 (the decode kernels round x: the kI4 decode
// contract, where prefill is exact in f32). A decode step of 16 sequences through the prefill
// path cost 14.9x one sequence's step (int4, TinyLlama shape, 2 threads, Emerald Rapids, no
// AMX), because it dequantizes every weight to f32 for 16 rows. kF8E4M3 also takes them for
// m < kF8DecodeBelowM on AVX512-VNNI CPUs without AMX unless GemmPrecision is kBf16 (where the
// prefill would run the f32 panels): on Zen 5 (fp8 TinyLlama, `sampan bench --batch`, 1 thread,
// against the prefill path) a B = 17 / 24 / 32 / 47 step 452 / 501 / 608 / 750 -> 247 / 328 /
// 445 / 621 ms. Their accuracy is the decode kernels' (exact, or 2^-16 * M on vdpbf16ps).
bool decode_kernels_take(DType dtype, int64_t m);
// Whether cpu::gemm runs m rows of x through quant_kernels_avx2_batch(): CPUs without
// AVX512-VNNI (AVX2, plain AVX-512), m from kAvx2BatchMinM where decode_kernels_take(dtype, m).
bool quant_on_avx2_batch(DType dtype, int64_t m);
// Largest QuantDotTable::rows of any table (the driver's buffers are sized with it).
constexpr int kMaxQuantRows = 16;
const QuantKernels& quant_kernels_avx512();
// The AVX-512 table with VNNI decode kernels (gemm_quant_avx512_vnni.cc): only where
// has_avx512_vnni().
const QuantKernels& quant_kernels_avx512_vnni();

// On AMX CPUs batched decode runs on tiles, where the weights stream once per call for up to 16
// rows of x at nearly the same cost per weight as for one row. Measured (bench_gemm_quant gemv,
// weights streamed from DRAM, TinyLlama shapes, Sapphire Rapids class VM, fraction of the read
// bandwidth at 1 / 2 threads):
//  - kI4 (gemm_quant_i4_amx.cc, AMX-INT8): 0.50 / 0.49 at m = 4, 0.47 / 0.45 at m = 8, 0.42 /
//    0.36 at m = 16, against the VNNI kernels' 0.45, 0.31 and (bf16 tiles, q - z panels, the
//    path this replaced) 0.23. At m = 1..2 the dot kernels stream faster (0.73 and 0.52-0.62
//    against 0.55 and 0.50): the tile kernel is held back by its per-group epilogue and its
//    packing not overlapping the tile products, so it starts at kI4AmxMinM. On an Emerald Rapids
//    VM (stop 54; bench_gemm_quant gemv --format int4 --group G, gate+up, weights streamed,
//    GB/s at 1 / 2 threads, AMX-INT8 against the VNNI decode kernels at the avx512_bf16 level,
//    two rounds) the tiles lost at m = 4 (g128: 3.7-6.9 / 6.6-10.7 against 6.0-7.0 / 8.6-9.4;
//    g32: 1.8-3.9 / 3.3-4.3 against 4.6-7.5 / 6.8-13.4) and, with 32-element groups (a tile step
//    and an epilogue per group), at m = 5 too (2.0-4.4 / 3.8-8.5 against 3.7-6.1 / 7.3-12.5);
//    from m = 6 (g32) and m = 5 (g64, g128) they are level or ahead. GGUF Q4_0 files run as
//    group 32, where batched decode at B = 4 was slower per token than B = 1.
//  - kF8E4M3 (gemm_quant_f8_amx.cc, AMX-BF16): from kF8AmxMinM rows on, prefill included. End
//    to end (TinyLlama shape, 2 threads, `sampan bench --batch`) a decode step of B rows over one
//    row's: 1.40-1.49x at B = 4..12 (AVX512-VNNI kernels of the time: 1.80-3.12x); fp8 prefill
//    on the tiles ran 1.0-1.4x the dequantize-to-memory path (bench_gemm_quant gemm). Since the
//    AVX-512 fp8 decode kernels took 4 rows of x per pass, an Emerald Rapids VM (AMX, 2 threads,
//    alternating SAMPAN_CPU_ISA=amx / avx512_bf16 runs) measured the tiles slower up to B = 6
//    (step at B = 4 / 5 / 6: 104-166 / 166-174 / 162-183 ms on the tiles, 59-84 / 105-113 /
//    117-125 ms on the AVX-512 kernels, one row's step 46-56 ms) and level or ahead from B = 8
//    (the tile packer's dequantizing and its stores, not the tile products, bound them there:
//    one tile product per weight tile instead of two, hi and lo x side by side, measured no
//    faster). So the tiles started at 7. Since the packer looks codes up in byte tables where the
//    CPU has AVX512-VBMI (pack_f8_vbmi, stop 55; gate+up weights streamed, GB/s at 1 / 2 threads,
//    two rounds against the f16-route packer): m = 8 5.5-5.7 / 8.0-8.3 -> 7.4-8.0 / 10.7-11.0,
//    m = 16 3.5-4.9 / 7.1-9.7 -> 6.7-6.8 / 8.8-9.6; `sampan bench --batch 1,8,16`, 2 threads,
//    three alternating pairs: B = 8 53.9-62.5 -> 74.9-84.1 tok/s, B = 16 97.7-98.8 ->
//    138.7-157.6. Against the AVX-512 kernels the tiles now win from m = 6 (8.3-16.4 against
//    6.9-9.8 GB/s at 2 threads), tie at 5 and lose at 4: they start at 6.
constexpr int64_t kF8AmxMinM = 6;
constexpr int64_t kI4AmxMinM = 5;       // groups of 64 and 128 elements
constexpr int64_t kI4AmxMinMGroup32 = 6;

// Whether cpu::gemm runs kF8E4M3 weights with m rows of x through gemm_quant_f8_amx (reads the
// CPU's level and the calling thread's GemmPrecision, like cpu::gemm; false for kI4).
bool quant_on_amx_tiles(DType dtype, int64_t m);
void gemm_quant_f8_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                       GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner);

// Whether cpu::gemm runs kI4 weights of this group size with m rows of x through
// gemm_quant_i4_amx: on AMX CPUs m = kI4AmxMinM (kI4AmxMinMGroup32 for groups of 32)
// ..kQuantPrefillMinM - 1, and m = kQuantPrefillMinM too unless GemmPrecision is kF32 (which
// keeps prefill exact in f32). The kI4 decode contract above (x rounded per group to x16).
bool i4_on_amx_int8(int64_t m, int64_t group);
// m <= 16 rows of x (gemm_quant_i4_amx.cc; CPUs with AMX only).
void gemm_quant_i4_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                       GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner);

// Whether cpu::gemm runs kI4 weights with m rows of x through gemm_quant_i4_vnni_prefill (or,
// at a level without AVX-512, gemm_quant_i4_avx2_prefill): levels without AMX that have
// AVX512-VNNI or no AVX-512 at all (the plain avx512 level, Skylake-SP, keeps the zmm FMA
// panels: ymm vpmaddwd + vpaddd multiply no faster than they there), the prefill sizes (not
// decode_kernels_take), GemmPrecision not kF32 (which keeps prefill exact in f32). The kI4
// decode contract above (x rounded per group to x16), except with kBf16 (vnni_x8).
bool i4_on_int_prefill(int64_t m);

// Whether the integer kernels (the prefill of i4_on_int_prefill and ggml_on_int_prefill, and
// every kI4 decode kernel but the AMX-INT8 one: i4_decode_x8) round x to int8 instead of
// int16: with GemmPrecision::kBf16, the precision that rounds x to bf16 elsewhere. x8 = round(x / s_x), s_x = absmax_g(x) / 127 per (row of x, weight group), so
// vpdpbusd multiplies 4 (unsigned weight byte, x8) pairs per lane, 64 products per instruction
// against vpdpwssd's 32 (~1.9x the x16 tile on Emerald Rapids, bench_gemm_quant). The rounding
// is off by s_x / 2 = absmax_g / 254, plus f32 roundings under 2^-22 absmax_g:
//   |y - y_exact| <= kX8Error * sum_g absmax_g(x) * sum_{c in g} |w_c|  +  1e-5 * M
// (llama.cpp rounds x so, to its Q8_0 / Q8_K activations, for every quantized type; bf16
// rounding of x is off by up to 2^-9 |x| per element, so this is the same order for the
// largest elements of a group and coarser for the smaller ones.)
// The kI4 decode then takes 2 vpdpbusd per 128 weights and row of x, the unpacking of a
// weight row 3 operations (gemm_quant_i4x8_avx512_vnni.cc): a batched decode step no longer
// bound by arithmetic from m = 4.
bool vnni_x8();
// Whether cpu::gemm's kI4 decode of m rows of x rounds x to x8: vnni_x8(), decode_kernels_take
// and not on AMX-INT8 tiles (the AVX512-VNNI x8 kernel, or below it the AVX2 x8 kernels: on a
// Zen 3 core, weights in L2, m = 1, 1.19x the x16 kernel; figures in gemm_quant_i4x8_avx2.cc).
bool i4_decode_x8(int64_t m, int64_t group);
constexpr double kX8Error = 1.0 / 254 + 0x1p-22;
constexpr int kX8Max = 127;
// A group whose 1 / s_x overflowed (absmax below about xmax * 2^-128) counts as zero there:
// s_x = 0 (a NaN s_x stays NaN) and 1 / s_x = 0 (the integer prefill and x8 decode preparations;
// static: each file compiles its own copy with its own ISA flags).
static inline void zero_if_inverse_overflows(float* sx, float* inv) {
  if (!(*inv < INFINITY)) {
    if (!std::isnan(*sx)) *sx = 0.0f;
    *inv = 0.0f;
  }
}
// Whether cpu::gemm runs kI4 weights with m rows of x on the AVX512-VNNI decode table
// (quant_kernels_avx512_vnni, or its x8 form quant_kernels_avx512_vnni_x8 where vnni_x8()):
// decode_kernels_take, not AMX-INT8 (i4_on_amx_int8), AVX512-VNNI, and m >= 2 where the CPU
// splits zmm operations (Zen 4 keeps the AVX2 kernels at m = 1).
bool i4_decode_on_vnni(int64_t m, int64_t group);
// kF8E4M3 decode on vdpbf16ps (gemm_quant_f8_avx512_bf16.cc) where f8_decode_on_dpbf16(m):
// AVX512-BF16 CPUs that issue it at the FMA rate (bf16_panels_preferred: AMD), GemmPrecision not
// kF32. The E4M3 bytes become bf16 by shifts (exact: 4 significant bits), and x is prepared as
// bf16 hi + lo (split_x, kSplitBf16) or hi alone (kBf16), both times 2^64. Accuracy, with M as
// above: x = hi + lo to within 2^-16 |x| (each rounding to bf16's 8 significant bits is off by
// at most 2^-8 of its input), products exact, sums in f32: below 2^-16 * M plus f32 summation
// (1e-5 * M) with kSplitBf16, as fp8 on AMX tiles; x rounded to bf16 (2^-8 |x|) with kBf16:
// below 2^-8 * M plus summation. For |x| in [2^-60, 2^64) (vdpbf16ps
// flushes denormals; smaller x lose precision, not range). Subnormal E4M3 codes are multiplied
// apart, as in the VNNI kernel. Otherwise the VNNI table's (kI4, prefill, epilogue).
// One Zen 5 core, weights in L2, m = 1: 2.2x the VNNI kernel (figures in the .cc).
const QuantKernels& quant_kernels_f8_dpbf16(bool split_x);
bool f8_decode_on_dpbf16(int64_t m);
// The VNNI table with the x8 kI4 decode kernel (gemm_quant_i4x8_avx512_vnni.cc).
const QuantKernels& quant_kernels_avx512_vnni_x8();
// Any m >= 1 (gemm_prefill_int_avx512_vnni.cc; AVX512-VNNI CPUs only).
void gemm_quant_i4_vnni_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                                GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner);
// The same on 8-lane vectors (gemm_prefill_int_avx2.cc), at levels without AVX-512: VEX
// VNNI where has_vex_vnni(), else vpmaddwd / vpmaddubsw (the same results).
void gemm_quant_i4_avx2_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                                GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner);

// cpu::gemm for w.dtype kF8E4M3 or kI4 (same contract; m >= 1).
void gemm_quant(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
                float* y, int64_t ldy, TaskRunner& runner);

#if defined(__AVX512F__)
// For the files compiled with AVX-512 (gemm_quant_avx512.cc, gemm_quant_*_amx.cc); `static` keeps
// each translation unit's copy private (as gemm_internal.h's helpers).
// 32 E4M3 bytes -> two vectors of f32 holding 2^-8 times their values, exactly: sign-extended to
// 16 bits and shifted so exponent and mantissa land in an f16 (bias 15 for 7), subnormals too.
static inline void fp8x32_to_f32(__m256i b, __m512& lo, __m512& hi) {
  const __m512i w = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(b), 7),
                                     _mm512_set1_epi16(static_cast<int16_t>(0xbf80)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
}

// s_x and 1 / s_x of x[c0, c0 + n) (n a multiple of 16) for the kI4 decode rounding
// (x16 = round(x / s_x), s_x = absmax / xmax, xmax = kI4XMax; the GGUF prefill passes 32767).
// A group holding a NaN or an infinity gets s_x = NaN (its outputs come out NaN, as with f32
// arithmetic) and x16 of no importance.
static inline void i4_x_group_scale(const float* x, int64_t c0, int64_t n, float* sx,
                                    float* inv, float xmax = kI4XMax) {
  __m512 m = _mm512_setzero_ps(), bad = _mm512_setzero_ps();
  for (int64_t c = c0; c < c0 + n; c += 16) {
    const __m512 v = _mm512_loadu_ps(x + c);
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
    bad = _mm512_fmadd_ps(v, _mm512_setzero_ps(), bad);  // NaN once an inf or NaN went in
  }
  const float absmax = _mm512_reduce_max_ps(m);
  *sx = 0.0f;
  *inv = 0.0f;
  if (_mm512_cmp_ps_mask(bad, bad, _CMP_UNORD_Q) != 0) {
    *sx = __builtin_nanf("");
  } else if (absmax > 0.0f) {
    *sx = absmax / xmax;
    *inv = xmax / absmax;
  }
}
#endif

}  // namespace sampan::cpu::gemm_detail
