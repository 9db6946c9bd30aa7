// Internal contract between the GEMM dispatcher (gemm_cpu.cc, baseline AVX2 flags) and the
// per-instruction-set files (gemm_avx2.cc, gemm_avx512.cc, gemm_amx.cc). Nothing here is
// public: callers use kernels/cpu/gemm_cpu.h.
//
// The FMA path (f32 weights always; bf16/f16 below the AMX threshold or without AMX) has two
// kernel families. Dot kernels (small m, memory-bound): a micro-kernel holds R weight rows in
// registers (converted to f32 on the fly) and multiplies them with up to MB rows of x, keeping
// R*MB vector accumulators, so every weight byte is loaded once per m-group and every x vector
// once per R rows. Panel kernels (larger m, compute-bound): weights packed k-major to f32 and
// an MR x NR register tile of outer products. The drivers (gemm_cpu.cc) are ISA-agnostic and
// reach the kernels through the FmaKernels table, so no template code is compiled twice under
// different -m flags (which would let the linker mix instruction sets).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/common/dtype.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/task_runner.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace sampan::cpu::gemm_detail {

// A growable scratch array on 64-byte boundaries (contents are not kept when it grows). AMX
// tile rows and AVX-512 vectors are 64 bytes: misaligned, each touches two cache lines, which
// measured 3x slower tile loads from L1 and L2.
template <class T>
class AlignedBuffer {
 public:
  T* data() { return data_.get(); }
  void reserve(int64_t n) {
    if (n <= size_) return;
    const size_t bytes = (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
    data_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    size_ = n;
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t size_ = 0;
};

// Largest R and MB any table uses; the driver sizes its buffers with them.
constexpr int kMaxDotRows = 4;
constexpr int kMaxDotM = 8;
// Widest vector (floats) any table keeps partial sums in.
constexpr int kMaxLanes = 16;

// Index of a weight dtype in the kernel tables.
constexpr int kDtF32 = 0;
constexpr int kDtF16 = 1;
constexpr int kDtBF16 = 2;

// For i < MB and r < R: out[i * R + r] = sum over kk in [k0, k1) of x[i * ldx + kk] * w[r][kk].
// The sum may be split over several calls on consecutive k ranges: `acc` holds the partial sums
// in vector form between calls ([MB * R * kMaxLanes] floats); `begin` starts from zero instead
// of reading acc, `end` reduces into out instead of writing acc. Every k range except the last
// must be a multiple of 32 long so the remainder masking only happens at the end of a row.
// w: R row pointers, each row [k1] of the table's dtype, 2-byte aligned at least.
// x: [MB, ldx] f32 (only columns [k0, k1) are read); for bf16 weights in the pair layout when
// FmaKernels::bf16_pair_x is set (then k0 is a multiple of 32 and columns up to the next one
// are read).
using DotFn = void (*)(const void* const* w, const float* x, int64_t ldx, int64_t k0, int64_t k1,
                       float* acc, bool begin, bool end, float* out);

// y[j] = g[j] + bg[j] (kStore), or silu(g[j] + bg[j]) * (u[j] + bu[j]) (kSiluMul); either bias
// may be null. y may alias g.
// g, u, y: [n]; bg, bu: [n] or null.
using EpilogueFn = void (*)(GemmEpilogue ep, const float* g, const float* bg, const float* u,
                            const float* bu, float* y, int64_t n);

// src: [n] of the dtype with table index `dt`; dst: [n] f32.
using ToF32Fn = void (*)(int dt, const void* src, float* dst, int64_t n);

// Micro-kernels of one shape: R weight rows against 1..max_m rows of x.
struct DotTable {
  int rows = 0;   // R: weight rows per call (even, so kSiluMul can pair gate and up rows)
  int min_m = 0;  // dot[dt][mb] is set for min_m <= mb <= max_m
  int max_m = 0;
  DotFn dot[3][kMaxDotM + 1] = {};
};

// The outer-product ("panel") kernels for large m: NR output columns of W are packed k-major
// into a panel once per k-chunk, then MR rows of x at a time are broadcast against it with an
// MR x NR register tile, so each weight element loaded feeds MR products and each x element
// NR/lanes, with no horizontal sums. Two layouts share the driver (gemm_cpu.cc):
//  - f32 (FMA path): panel [kc, NR] f32, x read in place as f32.
//  - bf16 pairs (vdpbf16ps, gemm_bf16_avx512.cc): panel [ceil(kc/2), NR, 2] bf16, each 32-bit
//    lane holding (w[2p], w[2p+1]) of one column (an odd k's last pair padded with 0); x
//    converted by prep_x into 32-bit units holding (bf16(x[2p]), bf16(x[2p+1])).
// rows: NR weight-row pointers (null: a zero column), each [k0 + kc] of dtype `dt`;
// panel: the layout's [kc, NR] panel, in a float buffer of kc * NR floats.
using PackFn = void (*)(int dt, const void* const* rows, int64_t k0, int64_t kc, float* panel);
// c[i][0:NR] (+)= sum over kk < kc of x[i][kk] * panel[kk][0:NR] for i < mr <= MR; it starts
// from zero unless `accumulate`. x: [mr, ldx] 32-bit units in the layout's x form (f32: x
// itself); panel: from pack; c: [mr, ldc] f32.
using PanelFn = void (*)(const float* x, int64_t ldx, int64_t mr, const float* panel, int64_t kc,
                         float* c, int64_t ldc, bool accumulate);
// x: [k] f32 -> out: [round_up(k, 32) / 2 * x_per_pair] 32-bit units, zero past k.
using PrepXFn = void (*)(const float* x, int64_t k, float* out);

constexpr int kMaxPanelNr = 64;

struct PanelKernels {
  int mr = 0;      // MR: rows of x per register tile
  int nr = 0;      // NR: output columns per panel (even)
  int64_t kc = 0;  // k per panel chunk, even (the panel should sit in L1)
  PackFn pack = nullptr;
  PanelFn kernel = nullptr;
  // Null: the kernel reads f32 x in place. Else the driver converts the rows of x a task needs
  // with it once per task, into per-thread scratch.
  PrepXFn prep_x = nullptr;
  // 32-bit units of x per two k: 2 for f32, 1 for bf16 pairs. The k-chunk starting at kk
  // (even) starts at unit kk / 2 * x_per_pair of a row.
  int x_per_pair = 2;
};

// From this many rows of x on, the FMA path uses the vdpbf16ps panel kernels instead of the dot
// kernels (bf16 arithmetic: twice the FMA's products per instruction), and the f32 panels on
// AVX2. Measured (AVX-512, 2048x2048 bf16 streamed from DRAM): the dot kernels win up to m = 8, the
// two are even around 12..16 and the panel kernels pull ahead from there (3x at m = 512:
// 122 vs 40 GFLOP/s), packing costing about one extra pass over the weights.
constexpr int64_t kPanelMinM = 12;
// The f32 panels' threshold for 16-bit weights on AVX-512 (FmaKernels::panel_min_m_16bit),
// where the panels convert every weight to f32 per call: measured on Zen 5 (bf16 TinyLlama,
// `sampan bench --batch`, 1 thread, decode step ms, dot kernels against f32 panels): m = 12 156 /
// 376, 16 202 / 411, 24 295 / 485, 32 393 / 566, 48 610 / 718, 64 799 / 856, 96 1255 / 1140;
// `bench_gemm gemm --isa avx512` (GFLOP/s, 1 thread) agrees up to m = 32 on the large matrices
// (gate+up, down, lm_head 1.0-1.8x) and is mixed at 48 (0.8-1.15x): 48 is kept. f32 weights
// (a copy, not a conversion) stay on kPanelMinM (dots 0.8-1.5x there), and so does AVX2, whose
// dot kernels win at m = 12 (236 / 288 ms) and lose from 16 (428 / 365).
constexpr int64_t kAvx512PanelMinM16 = 48;
// Most rows of x the dot kernels take in one walk (the walk's kMaxM): every table's threshold.
constexpr int64_t kMaxDotWalkM = kAvx512PanelMinM16;

struct FmaKernels {
  // R = 4 for up to a few rows of x: the default, also for prefill (fewer x loads per FMA).
  DotTable narrow;
  // R = 2 for more rows of x in one pass (decode batches up to 8), so the weights still stream
  // from memory in a single pass instead of one pass per narrow group.
  DotTable wide;
  // Rows of x beyond wide.max_m run in near-equal groups of the wide kernels (else in groups
  // of narrow.max_m). AVX2 sets it: its narrow kernels hold 8 accumulators, just the FMA
  // latency (4 cycles) times its throughput (2 per cycle), so a pass of 2 rows of x stalls on
  // the sums, where a wide group of 3..6 rows holds 6..12.
  bool group_on_wide = false;
  PanelKernels panel;  // from gemm_panel_min_m rows of x
  // From this many rows of x on, bf16 / f16 weights run on the f32 panels (`panel`) instead of
  // the dot kernels (<= kMaxDotWalkM); f32 weights from kPanelMinM, and the vdpbf16ps panels
  // take over from kPanelMinM (gemm_panel_min_m).
  int64_t panel_min_m_16bit = kPanelMinM;
  // When set, the bf16 dot kernels read x in "pair layout" and the driver converts x with it:
  // within each block of 32 elements, the 16 even-indexed ones then the 16 odd ones, each row
  // zero-padded to a multiple of 32 (ldx >= that). A kernel then widens 32 bf16 weights with
  // one load and two ALU ops (the low and high halves of each 32-bit pair) instead of two
  // loads and four. x: [k] f32; out: [round_up(k, 32)] f32.
  void (*bf16_pair_x)(const float* x, int64_t k, float* out) = nullptr;
  EpilogueFn epilogue = nullptr;
  ToF32Fn to_f32 = nullptr;
};

const FmaKernels& fma_kernels_avx2();
const FmaKernels& fma_kernels_avx512();

// The vdpbf16ps panel kernels (gemm_bf16_avx512.cc; call only when has_avx512_bf16()): x
// rounded to bf16 (GemmPrecision::kBf16). They take weights of every table dtype; f16 and f32
// are rounded to bf16 in the pack (nearest even).
const PanelKernels& bf16_panel_kernels();

// The panel kernels cpu::gemm runs for m >= gemm_panel_min_m on the FMA path, for weights of table
// dtype `dt` at the active ISA and GemmPrecision: the vdpbf16ps ones for 16-bit weights with
// kBf16 at avx512_bf16 without AMX, else `kt`'s f32 ones. (kSplitBf16 would need two vdpbf16ps
// per weight pair, the f32 FMA's multiply-add rate: measured on Zen 4 (bench_gemm, m = 128 and
// 512, TinyLlama shapes, 1 thread) within -10%..+8% of the f32 panels, so they stay, exact.)
const PanelKernels& prefill_panel_kernels(const FmaKernels& kt, int dt);

// Rows of x from which cpu::gemm's FMA path runs prefill_panel_kernels(kt, dt) instead of the
// dot kernels: kt.panel_min_m_16bit for 16-bit weights on the f32 panels, else kPanelMinM.
int64_t gemm_panel_min_m(const FmaKernels& kt, int dt);

// Whether cpu::gemm multiplies bf16 weights in bf16 arithmetic from 16 rows of x on (AMX, or
// the vdpbf16ps panels), so a caller that makes weights for it (quantized prefill) may as well
// round them to bf16: that costs no accuracy there and halves the bytes.
bool prefill_in_bf16();

// The whole GEMM on AMX tiles for bf16/f16 weights (same contract as cpu::gemm, m >= 1).
void gemm_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
              float* y, int64_t ldy, TaskRunner& runner);

// Weights that gemm_amx cannot read as bf16/f16 rows (kF8E4M3: gemm_quant_f8_amx.cc) come
// through a packer that writes 16 rows at a time straight into the tile-ordered panel in L1,
// so nothing is dequantized to memory.
struct AmxPanelSource {
  const void* ctx = nullptr;
  // Rows [row0, row0 + rows) (rows <= 16) of block b, k-steps [kb0, kb1) (32 elements each) in
  // tile order: out: [kb1 - kb0, 16, 32] bf16, 64-byte aligned, rows >= `rows` and columns >= k
  // zero. The weight is that value times col_scale (per row).
  void (*pack)(const void* ctx, int b, int64_t row0, int64_t rows, int64_t kb0, int64_t kb1,
               uint16_t* out) = nullptr;
  // Per block, f32 [rows] (2-byte alignment is enough) multiplied by col_scale_mul into each
  // output column before the bias, or null.
  const void* col_scale[kMaxGemmBlocks] = {};
  float col_scale_mul = 1.0f;
  // What the next unit's packing will read, for prefetching: per row, row_bytes of packed data
  // (step_bytes per k-step) at the weights' data[b].
  int64_t row_bytes = 0, step_bytes = 0;
};

// gemm_amx with the weights' rows (w.rows, w.bias, w.k, w.n_blocks) read through `src`.
void gemm_amx_source(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                     const AmxPanelSource& src, GemmEpilogue ep, float* y, int64_t ldy,
                     TaskRunner& runner);

// y[m, w.k] (row stride ldy) = x[m, n] (row stride ldx) · W, where W [n, w.k] is w's bf16
// blocks stacked (n = w.n()): training's dX = dY·W, on AMX-BF16 tiles with W read in place as
// the B operand (gemm_wt_amx.cc). Needs: the CPU has AMX; every block but the last has a
// multiple of 32 rows. x is rounded as gemm_precision() says (kBf16: to bf16, exact for a bf16
// dY; otherwise hi + lo bf16 parts, ~16 bits; kF32 is the caller's to route elsewhere).
// round_y: each y rounded to bf16 (nearest even, as round_bf16_cpu.h) as it is stored.
void gemm_amx_wt(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
                 int64_t ldy, TaskRunner& runner, bool round_y = false);

// From this many rows of x on, bf16/f16 GEMMs go to AMX when the CPU has it. Measured on TinyLlama
// shapes with weights streamed from DRAM (bench_gemm): the FMA path holds >= 85% of read
// bandwidth up to m = 4 and falls to ~60% at m = 6..8, where its FMAs (m per weight element) no
// longer hide memory latency, while AMX stays at ~70-80% for any m. Below the threshold x also
// stays f32 instead of being rounded to bf16.
constexpr int64_t kAmxMinM = 6;

#if defined(__AVX512F__)
// Helpers for the files compiled with AVX-512 (gemm_avx512.cc, gemm_amx.cc). `static` keeps
// each translation unit's copy private, so no copy can stand in for another at link time.

// e^v to about 2 ulp: v = n ln2 + r with |r| <= ln2/2, a degree-6 Taylor polynomial for e^r
// (truncation error < 1.2e-7 relative), then scalef multiplies by 2^n with correct overflow to
// inf and underflow to 0. The clamp keeps n exact; NaN passes through.
static inline __m512 exp512(__m512 v) {
  v = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(104.0f), v));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);  // ln2 high part, exact n*hi
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);      // ln2 low part
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// In-register transpose of a 16x16 matrix of 32-bit elements.
__attribute__((always_inline)) static inline void transpose16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    b[4 * g + 0] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
  }
  // b[4g + c], 128-bit lane l, holds column 4l + c of rows 4g..4g+3.
  for (int c = 0; c < 4; ++c) {
    const __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44);
    const __m512i e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xee);
    const __m512i f0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i f1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(e0, f0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(e0, f0, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(e1, f1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(e1, f1, 0xdd);
  }
}

// silu(v) = v / (1 + e^-v); e^-v = inf for very negative v gives the right limit -0. e^-v is
// taken no lower than e^-86.6 (a normal float): for v above 86.6, 1 + e^-v is 1 either way, and
// exp512's gradual underflow below it makes denormals, a microcode assist per lane.
static inline __m512 silu512(__m512 v) {
  const __m512 e =
      exp512(_mm512_max_ps(_mm512_set1_ps(-86.6f), _mm512_sub_ps(_mm512_setzero_ps(), v)));
  return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
#endif  // __AVX512F__

}  // namespace sampan::cpu::gemm_detail
