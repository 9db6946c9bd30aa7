// y = x · Wᵀ for a linear layer, on the CPU. Row-major everywhere; the weights are a
// GemmWeights view (kernels/common/gemm_weights.h): up to three row blocks in separate memory.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/gemm_weights.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// The weight view and epilogues are shared with the CUDA backend (kernels/common/gemm_weights.h,
// which also states the weight formats).
using sampan::GemmEpilogue;
using sampan::GemmWeights;
using sampan::kMaxGemmBlocks;

// How the bf16 paths treat the f32 activations x: AMX (bf16/f16 weights, m >= 6, CPUs with
// AMX-BF16) and, on CPUs with AVX512-BF16 but no AMX (Zen 4), the vdpbf16ps panels (bf16/f16
// weights, m >= 12, kBf16 only). Every other path keeps x in f32.
enum class GemmPrecision {
  // Default. On AMX: x = hi + lo, hi = bf16(x), lo = bf16(x - hi); every weight tile is
  // multiplied by both into the same f32 accumulators. x keeps ~16 significant bits (relative
  // error <= 2^-16), so a row's result barely depends on how many rows share the call (batched
  // serving matches a single-sequence run). Twice the tile products: prefill up to ~2x slower
  // than kBf16. Without AMX the exact f32 FMA path runs instead (on vdpbf16ps the split would
  // be no faster than it).
  kSplitBf16,
  // x rounded to bf16 (relative error up to 2^-8 per element), one product per tile or per
  // vdpbf16ps: prefill ~2x faster than kSplitBf16 on AMX, ~1.9x the f32 FMA panels on Zen 4.
  // The integer prefill of kI4 and GGUF weights on AVX512-VNNI without AMX rounds x per weight
  // group to int8 instead (vpdpbusd, error up to absmax_g / 254: gemm_quant.h,
  // vnni_x8): ~1.9x the kSplitBf16 tile on Emerald Rapids.
  kBf16,
  // Every product exact in f32 on every CPU: x stays f32, bf16/f16 weights convert to f32
  // exactly (the FMA panels, never AMX or vdpbf16ps) and quantized prefill dequantizes to f32.
  // On AMX CPUs prefill then runs at f32 FMA speed. What training at f32 precision runs
  // (LoraTrainer), whose gradients are checked against PyTorch's f32 ones.
  kF32,
};

// Process-wide choice. Starts from the environment variable SAMPAN_GEMM_PRECISION, read once at
// first use: "bf16" selects kBf16, "f32" kF32, anything else (or unset) kSplitBf16.
// set_gemm_precision is for tests and benchmarks; it may be called on any CPU but should not
// race with running GEMMs (each call reads it once, so a change takes effect at the next call).
// gemm_precision() returns the innermost ScopedGemmPrecision of the calling thread, if any.
GemmPrecision gemm_precision();
void set_gemm_precision(GemmPrecision p);

// For its lifetime, GEMMs called from the constructing thread use `p` instead of the
// process-wide choice; other threads are unaffected (a server's requests keep theirs). A GEMM
// reads the precision once per call on the calling thread, before it hands work to the
// runner's workers, so the scope covers the whole call. Scopes nest; destroy on the thread
// that constructed it.
class ScopedGemmPrecision {
 public:
  explicit ScopedGemmPrecision(GemmPrecision p);
  ~ScopedGemmPrecision();
  ScopedGemmPrecision(const ScopedGemmPrecision&) = delete;
  ScopedGemmPrecision& operator=(const ScopedGemmPrecision&) = delete;

 private:
  int previous_;
};

// Whether, on CPUs without AMX (or below the amx level), GemmPrecision::kBf16 multiplies 16-bit
// weights on the vdpbf16ps panels (and quantized prefill dequantizes to bf16 for them): on
// AVX512-BF16 levels unless the CPU issues vdpbf16ps at half the FMA rate
// (CpuFeatures::dpbf16_half_rate: Intel), where the exact f32 FMA panels are the faster ones
// (F16 prefill 512, TinyLlama shape, Emerald Rapids, 2 threads: 79 tok/s on the vdpbf16ps
// panels, 118 on the f32 ones). kBf16's bound still holds there (the products are exact).
// set_bf16_panels_policy is for tests and benchmarks (kOn runs the vdpbf16ps panels wherever
// the level has AVX512-BF16; not to be raced with running GEMMs).
enum class Bf16PanelsPolicy { kAuto, kOn, kOff };
bool bf16_panels_preferred();
void set_bf16_panels_policy(Bf16PanelsPolicy p);
Bf16PanelsPolicy bf16_panels_policy();

// Whether gemm() of m rows against w at the calling thread's precision, which must be
// kBf16, rounds x to bf16 (nearest even) itself: the AMX tiles (16-bit weights, m >=
// gemm_detail::kAmxMinM) do, so rounding x first would change no bit; other paths may not.
bool gemm_rounds_x_to_bf16(int64_t m, const GemmWeights& w);

// x: [m, w.k] f32, row stride ldx (elements).
// y: [m, n_out] f32, row stride ldy; n_out = w.n() for kStore, rows[0] for kSiluMul.
// Small m (decode) streams W once at memory speed; large m (prefill) uses AMX tiles for
// bf16/f16 weights when the CPU has them (see GemmPrecision), with kBf16 on AVX512-BF16 CPUs
// without AMX vdpbf16ps panels (where bf16_panels_preferred()), else AVX-512/AVX2 FMA.
//
// What a caller may rely on (implementation: gemm_cpu.cc, gemm_avx2.cc, gemm_avx512.cc,
// gemm_bf16_avx512.cc, gemm_amx.cc; internal contract in gemm_internal.h):
//  - Any m >= 1, k >= 1, rows[i] >= 1 (m == 0 does nothing); ldx >= k, ldy >= n_out. Only
//    y[i, 0:n_out] is written; x and y must not overlap. dtype is kF32, kF16, kBF16,
//    kF8E4M3, kI4 or kU8 with a GGUF block type (quantized: see GemmWeights; dequantized in
//    registers, never to memory for small m; the block types' accuracy: gemm_ggml.h).
//  - Weights are read with unaligned loads (2-byte alignment is enough, as in an mmapped
//    safetensors file), never past the end of a block, and never repacked persistently: small m
//    streams them in place; the AMX and large-m panel paths copy a few rows at a time into
//    per-thread scratch.
//  - Work is split over runner.concurrency() workers in contiguous ranges of output columns
//    (and of rows of x when there are fewer column blocks than workers).
//  - Accuracy. FMA path (every f32 weight; bf16/f16 with m < gemm_detail::kAmxMinM = 6, or on
//    CPUs without AMX except below): weights convert to f32 exactly and products accumulate in
//    f32, so the error is f32 summation error (~1e-6 relative to sum |x||w|). AMX path
//    (bf16/f16 weights, m >= 6, CPU with AMX-BF16): with kSplitBf16 (default) x is kept to
//    2^-16 relative and each output has one f32 accumulator: error below 2^-16 + k * 2^-24 of
//    sum |x||w|, measured ~1e-6 on random data; with kBf16 x is rounded to bf16, error up to
//    ~2^-8 of sum |x||w|. vdpbf16ps panel path (bf16/f16 weights, m >= kPanelMinM = 12, kBf16,
//    CPU with AVX512-BF16 and no AMX): as AMX with kBf16 (x rounded to bf16, one f32
//    accumulator per output; denormal inputs count as zero). f16 weights are rounded to bf16
//    on both bf16 paths (another 2^-8); so are kI4 weights at m > 16 (prefill dequantizes
//    row panels to bf16 for them; see gemm_quant.h) and GGUF block types at m >= 32
//    (gemm_ggml.h). On AMX, kF8E4M3 weights from m = 4 stay
//    exact on the tiles (only x's 2^-16 split), and kI4 weights at m = 4..16 run on the INT8
//    tiles with the kI4 decode rounding of x (gemm_quant.h).
//    Quantized weights at small m are dequantized exactly to f32 in registers: error is f32
//    summation error relative to sum |x| |dequantized w|, plus for kI4 the rounding of x per
//    weight group (gemm_detail::kI4DecodeXError, see gemm_quant.h). Set
//    SAMPAN_CPU_ISA=avx512 or GemmPrecision::kF32 to keep f32 x and f16 weights at any m.
//    kSiluMul's exp is ~2 ulp.
//  - Scratch memory is kept per thread between calls: on the AMX path the bf16 copy of x
//    (2*m*k bytes, 4*m*k with kSplitBf16) and, when x is too big for L2 and k > 2048, f32
//    partial sums (about 4*n*min(m, 320) bytes); on the vdpbf16ps panel path the bf16 copy of
//    the worker's rows of x (2*m*k bytes at most); on the FMA path O(m + k) floats.
void gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue epilogue,
          float* y, int64_t ldy, TaskRunner& runner);

}  // namespace sampan::cpu
