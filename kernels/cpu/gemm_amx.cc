// bf16/f16-weight GEMM on AMX-BF16 tiles (Sapphire Rapids and later). f16 weights are converted
// to bf16; products accumulate in f32.
//
// Precision of x (GemmPrecision, gemm_cpu.h). kBf16: x is rounded to bf16 (round to nearest
// even), one product per weight tile. kSplitBf16 (default): x = hi + lo with hi = bf16(x) and
// lo = bf16(x - hi) (x - hi is exact in f32), and each weight tile, loaded once, is multiplied
// by the hi and then the lo tile of x into the same f32 accumulators, which keeps ~16
// significant bits of x instead of 8. Without it a row's outputs depended on whether it ran in
// a batch (m >= kAmxMinM, AMX) or alone (f32 FMA path), enough to flip greedy decoding.
// Costs: twice the tile products and twice the packed x; the weight stream is unchanged. Up to
// kStackedMaxM = 8 rows of x (batched decode) the hi parts fill columns 0..7 of one x tile and
// the lo parts columns 8..15, so each weight tile takes one product instead of two, and the
// epilogue adds column i + 8 to column i: the same two sums of exact products, added once at
// the end instead of step by step (both f32).
//
// We compute Cᵀ = W·Xᵀ so the weight is the A operand: a tile is 16 weight rows x 32 k, which is
// how the row-major weight already lies, so W needs no transpose. X is packed once per call to
// bf16 in the VNNI layout the B operand wants: for each 16-row m-block and 32-wide k-step, a
// 1 KiB tile whose row r holds (x[m][2r], x[m][2r+1]) for the 16 m. The 16x16 f32 results are
// stored, transposed and written to y with the bias / SiLU-mul epilogue.
// Tiles: tmm0..3 = C for (2 weight groups) x (2 m-blocks), tmm4/5 = A, tmm6/7 = B (the hi
// tiles, then reloaded with the lo tiles in split mode).
//
// Weight rows are taken in "groups" of 16 rows inside one block and processed two groups at a
// time (a "unit": 32 output columns, or for kSiluMul 16 gate rows with the matching 16 up rows).
// Each k-chunk of a unit is copied into an aligned, tile-ordered scratch panel (converting f16,
// zero-filling short groups and the k tail) rather than loaded in place with a k*2-byte stride:
// weights in a safetensors file are not 64-byte aligned, and a misaligned tile row touches two
// cache lines (measured 3x slower tile loads). The copy reads each row once per m-chunk and
// never past the end of a block; while a unit computes, the next unit's rows are prefetched.
//
// Blocking: k in chunks of <= kChunkSteps*32 and m in chunks sized so the packed x chunk
// (<= kXChunkBytes) stays in L2 while the units stream past it; a unit's panel is reused by
// every m-block pair of the chunk from L2. Partial sums between k-chunks live in a per-thread
// f32 buffer. Threads take contiguous ranges of units (and of m-block pairs when there are
// fewer units than threads). Tiles are configured per task and released at its end.
//
// Quantized weights (gemm_amx_source, AmxPanelSource in gemm_internal.h) come through a packer
// that dequantizes a group of rows straight into the panel (fp8: its values are exact in bf16,
// and their row scale multiplies the finished columns in the epilogue).
// With one m-block pair per m-chunk (batched decode), a unit is packed kInterleaveSteps k-steps
// at a time into alternating halves of its panel, one slice ahead of its tile products, so the
// panel stays in L1 (a whole-k panel went to L2 and back; 4 steps measured best of 1..16) --
// or, for 64-byte aligned bf16 rows (the engine's own buffers), not packed at all: the A tiles
// are loaded from the weight rows with their row length as the stride (direct_tiles).
// Both changes measured together on an Emerald Rapids VM (bf16 gate+up 2 x 5632 x 2048, weights
// streamed from memory, GB/s of weights, alternating runs): m = 8 6.4-9.8 -> 8.5-11.3 (1
// thread), 10.5-11.9 -> 16.3-19.8 (2 threads), m = 16 (direct only) 9.7-11.3 -> 13.3-15.0 (2
// threads); one row's GEMV 21-23 there. Accumulating the lo products in the spare C tiles of a
// single m-block instead (independent chains) measured 0.8x at m = 12-16, 2 threads.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// (maybe-)uninitialized (fixed in GCC 13; the definite form shows at -O1, the Sanitize build);
// the warning points into the header, so it is silenced before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm_internal.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int64_t kChunkSteps = 64;        // k-steps (of 32) per k-chunk when x is large
constexpr int64_t kXChunkBytes = 5 << 18;  // budget for the packed x chunk kept in L2 (1.25 MiB)
constexpr int64_t kTileElems = 512;        // bf16 elements in one 16x32 tile
constexpr int64_t kInterleaveSteps = 4;    // k-steps packed at a time for one m-block pair
constexpr int64_t kStackedMaxM = 8;        // rows of x whose hi and lo parts share one x tile

using amx::configure_tiles;

inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Packs x rows [16*mb, 16*mb + 16) into VNNI tiles, `xs` per k-step (1: bf16(x); 2: the hi tile
// then the lo tile); rows >= m and columns >= k are zero. `stacked` (m <= kStackedMaxM, xs = 1):
// one tile per k-step whose columns 0..7 hold the hi parts of rows 0..7 and columns 8..15 their
// lo parts.
// x: [m, ldx] f32; xp: [n_kb, xs, 16, 16, 2] bf16.
void pack_x_block(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mb, int64_t n_kb,
                  int64_t xs, bool stacked, uint16_t* xp) {
  for (int64_t kb = 0; kb < n_kb; ++kb) {
    const int64_t c = kb * 32;
    const __mmask16 lo = mask16(k - c), hi = mask16(k - c - 16);
    __m512i r[16], rl[16];
    for (int i = 0; i < 16; ++i) {
      const int64_t row = stacked ? i % kStackedMaxM : mb * 16 + i;
      r[i] = rl[i] = _mm512_setzero_si512();
      if (row >= m) continue;
      const float* p = x + row * ldx + c;
      const __m512 v0 = _mm512_maskz_loadu_ps(lo, p), v1 = _mm512_maskz_loadu_ps(hi, p + 16);
      const __m256bh h0 = _mm512_cvtneps_pbh(v0), h1 = _mm512_cvtneps_pbh(v1);
      if (stacked && i >= kStackedMaxM) {
        r[i] = amx::concat_bf16(_mm512_cvtneps_pbh(amx::bf16_residual(v0, h0)),
                                _mm512_cvtneps_pbh(amx::bf16_residual(v1, h1)));
        continue;
      }
      r[i] = amx::concat_bf16(h0, h1);
      if (xs == 2) {
        rl[i] = amx::concat_bf16(_mm512_cvtneps_pbh(amx::bf16_residual(v0, h0)),
                                 _mm512_cvtneps_pbh(amx::bf16_residual(v1, h1)));
      }
    }
    uint16_t* out = xp + kb * xs * kTileElems;
    transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + i * 32, r[i]);
    if (xs == 2) {
      transpose16(rl);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + kTileElems + i * 32, rl[i]);
    }
  }
}

// 16 weight rows (or fewer) of one block.
struct Group {
  int block = 0;
  int64_t row0 = 0;                // first row in the block
  int64_t rows = 0;                // 1..16
  int64_t col = 0;                 // output column of the first row
  const float* bias = nullptr;     // [rows] or null
  const void* scale = nullptr;     // [rows] f32 column multipliers (AmxPanelSource) or null
};

struct Unit {
  Group g[2];
  int n_groups = 0;
};

Group make_group(const GemmWeights& w, const AmxPanelSource* src, int b, int64_t r, int64_t rows,
                 int64_t col) {
  const char* scale = src && src->col_scale[b]
                          ? static_cast<const char*>(src->col_scale[b]) + r * 4
                          : nullptr;
  return {b, r, rows, col, w.bias[b] ? w.bias[b] + r : nullptr, scale};
}

std::vector<Unit> make_units(const GemmWeights& w, const AmxPanelSource* src, GemmEpilogue ep) {
  std::vector<Unit> units;
  if (ep == GemmEpilogue::kSiluMul) {
    for (int64_t r = 0; r < w.rows[0]; r += 16) {
      Unit u;
      u.n_groups = 2;
      const int64_t rows = std::min<int64_t>(16, w.rows[0] - r);
      for (int b = 0; b < 2; ++b) u.g[b] = make_group(w, src, b, r, rows, r);
      units.push_back(u);
    }
    return units;
  }
  std::vector<Group> groups;
  int64_t base = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    for (int64_t r = 0; r < w.rows[b]; r += 16) {
      groups.push_back(make_group(w, src, b, r, std::min<int64_t>(16, w.rows[b] - r), base + r));
    }
    base += w.rows[b];
  }
  for (size_t i = 0; i < groups.size(); i += 2) {
    Unit u;
    u.g[0] = groups[i];
    u.n_groups = 1;
    if (i + 1 < groups.size()) {
      u.g[1] = groups[i + 1];
      u.n_groups = 2;
    }
    units.push_back(u);
  }
  return units;
}

struct AmxScratch {
  AlignedBuffer<uint16_t> panel[2];  // per group: [steps, 16, 32] bf16, one A tile per k-step
  AlignedBuffer<float> acc;          // [units, m-pairs, 4, 16, 16] partial C between k-chunks
  alignas(64) float c[2][1024];      // finished C tiles, double-buffered for the late epilogue
};

AmxScratch& amx_scratch() {
  thread_local AmxScratch s;
  return s;
}

inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// Copies k-steps [kb0, kb1) of a group of bf16/f16 rows into tile order, converting f16 to
// bf16 and zero-filling rows >= grp.rows and columns >= k, so tile loads are aligned, contiguous
// 1 KiB reads and no load touches memory past the block. dst: [kb1 - kb0, 16, 32] bf16, 64-byte
// aligned.
void pack_a(const GemmWeights& w, const Group& grp, int64_t kb0, int64_t kb1, uint16_t* dst) {
  const int64_t k = w.k;
  const bool is_f16 = w.dtype == DType::kF16;
  const uint16_t* data = static_cast<const uint16_t*>(w.data[grp.block]) + grp.row0 * k;
  // k-step outer, row inner: the 16 rows are read as 16 concurrent streams, which keeps more
  // DRAM requests in flight than reading one 4 KiB row after another.
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t c = kb * 32;
    const __mmask16 lo_mask = mask16(k - c), hi_mask = mask16(k - c - 16);
    const __mmask32 mask = mask32(k - c);
    uint16_t* out = dst + (kb - kb0) * kTileElems;
    for (int r = 0; r < 16; ++r) {
      __m512i v = _mm512_setzero_si512();
      if (r < grp.rows) {
        const uint16_t* src = data + r * k + c;
        if (is_f16) {
          const __m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lo_mask, src));
          const __m512 hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(hi_mask, src + 16));
          const __m512bh h = _mm512_cvtne2ps_pbh(hi, lo);
          v = reinterpret_cast<const __m512i&>(h);
        } else {
          v = _mm512_maskz_loadu_epi16(mask, src);
        }
      }
      _mm512_store_si512(out + r * 32, v);
    }
  }
}

// Walks up to 40 byte ranges a few cache lines at a time, spread over the steps of a tile loop:
// the weight rows the next unit will pack (so they come from DRAM into L2 while tiles compute
// instead of stalling pack_a), and the rows of y the current pair will write (so the epilogue's
// stores do not each wait for a read-for-ownership miss). A range that continues the previous
// one extends it (consecutive rows read in full are one range).
class LinePrefetcher {
 public:
  void clear() { n_ = cur_ = 0; }
  void add(const void* p, int64_t bytes) {
    if (bytes <= 0) return;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n_ > 0 && a >= begin_[n_ - 1] && a <= end_[n_ - 1]) {
      end_[n_ - 1] = std::max<uintptr_t>(end_[n_ - 1], a + bytes);
      return;
    }
    if (n_ == kMaxRanges) return;
    begin_[n_] = a & ~uintptr_t(63);
    end_[n_] = a + bytes;
    ++n_;
  }
  void start() {
    cur_ = 0;
    at_ = n_ ? begin_[0] : 0;
  }
  int64_t lines() const {
    int64_t n = 0;
    for (int i = 0; i < n_; ++i) n += (end_[i] - begin_[i] + 63) / 64;
    return n;
  }
  template <int kHint>
  void next(int64_t n) {
    for (; n > 0 && cur_ < n_; --n) {
      _mm_prefetch(reinterpret_cast<const char*>(at_), static_cast<_mm_hint>(kHint));
      at_ += 64;
      if (at_ >= end_[cur_] && ++cur_ < n_) at_ = begin_[cur_];
    }
  }

 private:
  static constexpr int kMaxRanges = 40;
  uintptr_t begin_[kMaxRanges], end_[kMaxRanges];
  uintptr_t at_ = 0;
  int n_ = 0, cur_ = 0;
};

// Prefetch work per tile step: `w` lines of weights for the next unit, `y` lines of output.
struct StepPrefetch {
  LinePrefetcher* w;
  int64_t w_lines;
  LinePrefetcher* y;
  int64_t y_lines;
};

// Where a group's A tile of step s lies: at a + s * step, rows `stride` bytes apart (a packed
// panel: kTileElems, 64; the weight rows themselves: 32, their byte length).
struct ATiles {
  int64_t step = kTileElems;
  int64_t stride = 64;
};

// C[g][b] += A_g · B_b over k-steps [s0, s1), with G weight groups and NB m-blocks. The C tiles
// are already loaded or zeroed. a0/a1: packed A of each group; xp0/xp1: the B tiles of each
// m-block for step 0 (kSplit: hi then lo per step). Loads sit right before their first use so a
// load can overlap the previous product (tile registers are not renamed). In split mode the A
// tiles stay in tmm4/5 for the lo products: the weights are loaded once per step either way.
template <int G, int NB, bool kSplit>
void tile_loop(const uint16_t* a0, const uint16_t* a1, const ATiles& at, const uint16_t* xp0,
               const uint16_t* xp1, int64_t s0, int64_t s1, const StepPrefetch& pf) {
  constexpr int64_t kStep = (kSplit ? 2 : 1) * kTileElems;
  for (int64_t s = s0; s < s1; ++s) {
    _tile_loadd(4, a0 + s * at.step, at.stride);
    _tile_loadd(6, xp0 + s * kStep, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) {
      _tile_loadd(7, xp1 + s * kStep, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (G == 2) {
      _tile_loadd(5, a1 + s * at.step, at.stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NB == 2) _tile_dpbf16ps(3, 5, 7);
    }
    if constexpr (kSplit) {
      _tile_loadd(6, xp0 + s * kStep + kTileElems, 64);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (NB == 2) {
        _tile_loadd(7, xp1 + s * kStep + kTileElems, 64);
        _tile_dpbf16ps(1, 4, 7);
      }
      if constexpr (G == 2) {
        _tile_dpbf16ps(2, 5, 6);
        if constexpr (NB == 2) _tile_dpbf16ps(3, 5, 7);
      }
    }
    pf.w->next<_MM_HINT_T1>(pf.w_lines);
    pf.y->next<_MM_HINT_T0>(pf.y_lines);
  }
}

template <bool kSplit>
void run_tiles_as(int G, int NB, const uint16_t* const a[2], const ATiles& at,
                  const uint16_t* xp0, const uint16_t* xp1, int64_t s0, int64_t s1,
                  const StepPrefetch& pf) {
  if (G == 2 && NB == 2) tile_loop<2, 2, kSplit>(a[0], a[1], at, xp0, xp1, s0, s1, pf);
  if (G == 2 && NB == 1) tile_loop<2, 1, kSplit>(a[0], a[1], at, xp0, xp1, s0, s1, pf);
  if (G == 1 && NB == 2) tile_loop<1, 2, kSplit>(a[0], a[1], at, xp0, xp1, s0, s1, pf);
  if (G == 1 && NB == 1) tile_loop<1, 1, kSplit>(a[0], a[1], at, xp0, xp1, s0, s1, pf);
}

// a: the groups' A tiles at step 0 (packed panels, or the weight rows, as `at` says).
void run_tiles(bool split, int G, int NB, const uint16_t* const a[2], const ATiles& at,
               const uint16_t* xp0, const uint16_t* xp1, int64_t s0, int64_t s1,
               const StepPrefetch& pf) {
  if (split) {
    run_tiles_as<true>(G, NB, a, at, xp0, xp1, s0, s1, pf);
  } else {
    run_tiles_as<false>(G, NB, a, at, xp0, xp1, s0, s1, pf);
  }
}

// Transposed tile (16 weight rows x 16 m) -> t[i] = the 16 outputs of row m0 + i. `stacked`:
// columns i and i + 8 hold the products of row i's hi and lo parts, whose sum t[i] becomes.
inline void load_transposed(const float* c, bool stacked, __m512i t[16]) {
  for (int j = 0; j < 16; ++j) t[j] = _mm512_loadu_si512(c + j * 16);
  transpose16(t);
  if (stacked) {
    for (int i = 0; i < kStackedMaxM; ++i) {
      t[i] = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(t[i]),
                                               _mm512_castsi512_ps(t[i + kStackedMaxM])));
    }
  }
}

// A group's column multipliers (AmxPanelSource::col_scale times mul), or ones: C * 1 + bias in
// one fma is the plain sum.
inline __m512 col_scale(const Group& grp, float mul) {
  if (!grp.scale) return _mm512_set1_ps(1.0f);
  return _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(grp.rows), grp.scale), _mm512_set1_ps(mul));
}

// Writes the finished C tiles of a unit for m rows [m0, m0 + 16*NB) to y.
void epilogue(const Unit& u, GemmEpilogue ep, float mul, bool stacked, const float* c, int NB,
              int64_t m0, int64_t m, float* y, int64_t ldy) {
  for (int b = 0; b < NB; ++b) {
    const int64_t rows_m = std::min<int64_t>(16, m - (m0 + 16 * b));
    if (rows_m <= 0) break;
    if (ep == GemmEpilogue::kSiluMul) {
      const Group& gg = u.g[0];
      const Group& gu = u.g[1];
      const __mmask16 mask = mask16(gg.rows);
      const __m512 bg = gg.bias ? _mm512_maskz_loadu_ps(mask, gg.bias) : _mm512_setzero_ps();
      const __m512 bu = gu.bias ? _mm512_maskz_loadu_ps(mask, gu.bias) : _mm512_setzero_ps();
      const __m512 sg = col_scale(gg, mul), su = col_scale(gu, mul);
      __m512i tg[16], tu[16];
      load_transposed(c + (0 + b) * 256, stacked, tg);
      load_transposed(c + (2 + b) * 256, stacked, tu);
      for (int64_t i = 0; i < rows_m; ++i) {
        const __m512 g = _mm512_fmadd_ps(_mm512_castsi512_ps(tg[i]), sg, bg);
        const __m512 up = _mm512_fmadd_ps(_mm512_castsi512_ps(tu[i]), su, bu);
        _mm512_mask_storeu_ps(y + (m0 + 16 * b + i) * ldy + gg.col, mask,
                              _mm512_mul_ps(silu512(g), up));
      }
      continue;
    }
    for (int g = 0; g < u.n_groups; ++g) {
      const Group& grp = u.g[g];
      const __mmask16 mask = mask16(grp.rows);
      const __m512 bias = grp.bias ? _mm512_maskz_loadu_ps(mask, grp.bias) : _mm512_setzero_ps();
      const __m512 sc = col_scale(grp, mul);
      __m512i t[16];
      load_transposed(c + (2 * g + b) * 256, stacked, t);
      for (int64_t i = 0; i < rows_m; ++i) {
        _mm512_mask_storeu_ps(y + (m0 + 16 * b + i) * ldy + grp.col, mask,
                              _mm512_fmadd_ps(_mm512_castsi512_ps(t[i]), sc, bias));
      }
    }
  }
}

struct AmxJob {
  const Unit* units;
  const GemmWeights* w;
  const AmxPanelSource* src;  // null: bf16/f16 rows read by pack_a
  int64_t k, n_kb, n_mb, m;
  int64_t xs;          // x tiles per k-step: 1 (bf16, or stacked hi and lo) or 2 (hi, lo)
  bool stacked;        // m <= kStackedMaxM in kSplitBf16: hi and lo parts in one x tile
  const uint16_t* xp;  // [n_mb, n_kb, xs, 16, 16, 2]
  GemmEpilogue ep;
  float* y;
  int64_t ldy;
  int64_t chunk_steps;  // k-steps per k-chunk
  int64_t mc_pairs;     // m-block pairs per m-chunk
};

// A finished (unit, pair) whose epilogue is still to run.
struct PendingEpilogue {
  const Unit* unit = nullptr;
  int nb = 0;
  int64_t m0 = 0;
  float* c = nullptr;  // [4, 16, 16]
};

// Queues what packing k-steps [kb0, kb1) of unit u will read.
void add_prefetch(const AmxJob& job, const Unit& u, int64_t kb0, int64_t kb1, LinePrefetcher& pf) {
  const AmxPanelSource* src = job.src;
  const int64_t row_bytes = src ? src->row_bytes : job.k * 2;
  const int64_t step_bytes = src ? src->step_bytes : 64;
  const int64_t bytes = std::min(row_bytes - kb0 * step_bytes, (kb1 - kb0) * step_bytes);
  for (int g = 0; g < u.n_groups; ++g) {
    const Group& grp = u.g[g];
    const char* data = static_cast<const char*>(job.w->data[grp.block]);
    for (int64_t r = 0; r < grp.rows; ++r) {
      pf.add(data + (grp.row0 + r) * row_bytes + kb0 * step_bytes, bytes);
    }
  }
}

// The first weight row of a group (bf16/f16 rows read in place).
inline const uint16_t* group_rows(const AmxJob& job, const Group& grp) {
  return static_cast<const uint16_t*>(job.w->data[grp.block]) + grp.row0 * job.k;
}

// Whether a unit's A tiles are loaded straight from its weight rows instead of a packed panel,
// when a single m-block pair (batched decode) would not reuse the panel: bf16 rows, groups of
// 16 rows, k a multiple of 32 and the rows 64-byte aligned, so that every tile row is one whole
// cache line inside the block. Measured on an Emerald Rapids core (a stand-alone loop of 32-row
// units, 64 MiB of weights streamed from memory, m <= 16, alternating): 1.1-1.25x the packed
// panel's speed, whose copy sends every weight line through the store buffer as well.
bool direct_tiles(const AmxJob& job, const Unit& u) {
  if (job.src || job.w->dtype != DType::kBF16 || job.k % 32 != 0) return false;
  for (int g = 0; g < u.n_groups; ++g) {
    if (u.g[g].rows != 16 || reinterpret_cast<uintptr_t>(group_rows(job, u.g[g])) % 64 != 0) {
      return false;
    }
  }
  return true;
}

// Units [u0, u1) against m-block pairs [p0, p1).
void run_amx_task(const AmxJob& job, int64_t u0, int64_t u1, int64_t p0, int64_t p1) {
  AmxScratch& s = amx_scratch();
  const int64_t n_kc = (job.n_kb + job.chunk_steps - 1) / job.chunk_steps;
  if (n_kc > 1) {
    const size_t need = static_cast<size_t>((u1 - u0) * job.mc_pairs * 1024);
    s.acc.reserve(static_cast<int64_t>(need));
  }
  const int64_t panel_steps = std::max(job.chunk_steps, 2 * kInterleaveSteps);
  for (int g = 0; g < 2; ++g) {
    s.panel[g].reserve(panel_steps * kTileElems);
  }
  const uint16_t* const a[2] = {s.panel[0].data(), s.panel[1].data()};
  const float mul = job.src ? job.src->col_scale_mul : 1.0f;
  LinePrefetcher pf_w, pf_y;
  PendingEpilogue pending;
  auto flush = [&] {
    if (pending.unit)
      epilogue(*pending.unit, job.ep, mul, job.stacked, pending.c, pending.nb, pending.m0, job.m,
               job.y, job.ldy);
    pending.unit = nullptr;
  };
  int flip = 0;
  configure_tiles();
  for (int64_t pc = p0; pc < p1; pc += job.mc_pairs) {
    const int64_t pe = std::min(p1, pc + job.mc_pairs);
    for (int64_t kc = 0; kc < n_kc; ++kc) {
      const int64_t kb0 = kc * job.n_kb / n_kc, kb1 = (kc + 1) * job.n_kb / n_kc;
      const int64_t steps = kb1 - kb0;
      // One m-block pair (batched decode): each unit is packed a few k-steps at a time into
      // alternating halves of the panel, just before its tile products, so the panel stays in
      // L1 (a whole-k panel is 2 x 64 KiB at k = 2048, and its round trip through L2 cost
      // more than the products). Several pairs reuse a whole-k panel instead.
      const bool interleave = pe - pc == 1;
      auto pack = [&](const Unit& u, int64_t from, int64_t to, int64_t at) {
        for (int g = 0; g < u.n_groups; ++g) {
          uint16_t* out = s.panel[g].data() + at * kTileElems;
          if (job.src) {
            job.src->pack(job.src->ctx, u.g[g].block, u.g[g].row0, u.g[g].rows, kb0 + from,
                          kb0 + to, out);
          } else {
            pack_a(*job.w, u.g[g], kb0 + from, kb0 + to, out);
          }
        }
      };
      for (int64_t ui = u0; ui < u1; ++ui) {
        const Unit& u = job.units[ui];
        const bool direct = interleave && direct_tiles(job, u);
        if (!interleave) pack(u, 0, steps, 0);
        pf_w.clear();
        if (ui + 1 < u1) add_prefetch(job, job.units[ui + 1], kb0, kb1, pf_w);
        pf_w.start();
        const int64_t unit_steps = (pe - pc) * steps;
        const int64_t w_lines = (pf_w.lines() + unit_steps - 1) / unit_steps;
        // Output columns of this unit: contiguous for kStore, the gate half for kSiluMul.
        const int64_t y_col = u.g[0].col;
        const int64_t y_cols = job.ep == GemmEpilogue::kSiluMul || u.n_groups == 1
                                   ? u.g[0].rows
                                   : u.g[1].col + u.g[1].rows - y_col;
        for (int64_t p = pc; p < pe; ++p) {
          const int64_t mb = 2 * p;
          const int NB = mb + 1 < job.n_mb ? 2 : 1;
          float* acc =
              n_kc > 1 ? s.acc.data() + ((ui - u0) * job.mc_pairs + (p - pc)) * 1024 : nullptr;
          // C tile t = 2 g + b: [16 weight rows, 16 m] f32.
          if (kc == 0) {
            amx::zero_c4();
          } else {
            amx::load_c4(acc);
          }
          const uint16_t* xp0 = job.xp + (mb * job.n_kb + kb0) * job.xs * kTileElems;
          const uint16_t* xp1 = xp0 + job.n_kb * job.xs * kTileElems;
          pf_y.clear();
          if (kc + 1 == n_kc) {
            for (int64_t i = mb * 16; i < std::min(job.m, mb * 16 + 16 * NB); ++i) {
              pf_y.add(job.y + i * job.ldy + y_col, y_cols * 4);
            }
          }
          pf_y.start();
          const StepPrefetch pf{&pf_w, w_lines, &pf_y, (pf_y.lines() + steps - 1) / steps};
          const bool hi_lo = job.xs == 2;
          if (direct) {
            const uint16_t* const ad[2] = {
                group_rows(job, u.g[0]) + kb0 * 32,
                u.n_groups > 1 ? group_rows(job, u.g[1]) + kb0 * 32 : nullptr};
            const ATiles at{32, job.k * 2};
            const int64_t split = std::min<int64_t>(steps, 4);
            run_tiles(hi_lo, u.n_groups, NB, ad, at, xp0, xp1, 0, split, pf);
            flush();
            run_tiles(hi_lo, u.n_groups, NB, ad, at, xp0, xp1, split, steps, pf);
          } else if (interleave) {
            // Packing runs one slice ahead: a tile load right after the stores that wrote
            // its panel waits for them to drain, so the tile products of slice j are queued
            // first and slice j + 1 is packed while they run.
            pack(u, 0, std::min(steps, kInterleaveSteps), 0);
            for (int64_t s0 = 0; s0 < steps; s0 += kInterleaveSteps) {
              const int64_t s1 = std::min(steps, s0 + kInterleaveSteps);
              const int64_t at = (s0 / kInterleaveSteps) % 2 * kInterleaveSteps;
              const uint16_t* const ah[2] = {a[0] + at * kTileElems, a[1] + at * kTileElems};
              const int64_t xoff = s0 * job.xs * kTileElems;
              run_tiles(hi_lo, u.n_groups, NB, ah, ATiles{}, xp0 + xoff, xp1 + xoff, 0,
                        s1 - s0, pf);
              if (s1 < steps) {
                pack(u, s1, std::min(steps, s1 + kInterleaveSteps), kInterleaveSteps - at);
              }
              if (s0 == 0) flush();
            }
          } else {
            // The previous pair's epilogue runs after a few steps have been queued, so the
            // vector work overlaps the tile products instead of waiting in line behind them.
            const int64_t split = std::min<int64_t>(steps, 4);
            run_tiles(hi_lo, u.n_groups, NB, a, ATiles{}, xp0, xp1, 0, split, pf);
            flush();
            run_tiles(hi_lo, u.n_groups, NB, a, ATiles{}, xp0, xp1, split, steps, pf);
          }
          if (kc + 1 < n_kc) {
            amx::store_c4(acc);
          } else {
            float* c = s.c[flip];
            flip ^= 1;
            amx::store_c4(c);
            pending = {&u, NB, mb * 16, c};
          }
        }
      }
    }
  }
  flush();
  _tile_release();
}

AlignedBuffer<uint16_t>& packed_x() {
  thread_local AlignedBuffer<uint16_t> xp;
  return xp;
}

GemmPrecision precision_from_env() {
  const char* env = std::getenv("SAMPAN_GEMM_PRECISION");
  if (env && std::strcmp(env, "bf16") == 0) return GemmPrecision::kBf16;
  if (env && std::strcmp(env, "f32") == 0) return GemmPrecision::kF32;
  return GemmPrecision::kSplitBf16;
}

// The calling thread's ScopedGemmPrecision, or -1.
thread_local int t_scoped_precision = -1;

std::atomic<int>& precision_slot() {
  static std::atomic<int> slot{static_cast<int>(precision_from_env())};
  return slot;
}

void run_gemm_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                  const AmxPanelSource* src, GemmEpilogue ep, float* y, int64_t ldy,
                  TaskRunner& runner) {
  const int64_t k = w.k;
  const int64_t n_kb = (k + 31) / 32;
  const int64_t n_mb = (m + 15) / 16;
  const int64_t threads = std::max(1, runner.concurrency());
  const bool split = gemm_precision() == GemmPrecision::kSplitBf16;
  const bool stacked = split && m <= kStackedMaxM;
  const int64_t xs = split && !stacked ? 2 : 1;

  AlignedBuffer<uint16_t>& xp = packed_x();
  xp.reserve(n_mb * n_kb * xs * kTileElems);
  const int64_t pack_tasks = std::min(threads, n_mb);
  runner.run(pack_tasks, [&](int64_t t) {
    for (int64_t mb = n_mb * t / pack_tasks; mb < n_mb * (t + 1) / pack_tasks; ++mb) {
      pack_x_block(x, ldx, m, k, mb, n_kb, xs, stacked, xp.data() + mb * n_kb * xs * kTileElems);
    }
  });

  const std::vector<Unit> units = make_units(w, src, ep);
  const int64_t n_units = static_cast<int64_t>(units.size());
  const int64_t n_pairs = (n_mb + 1) / 2;
  // k is only split when all of x would not fit the L2 budget: with few rows of x (batched
  // decode) one k-chunk avoids the partial-sum round trips and packs each unit in one go.
  const int64_t pair_step_bytes = 2048 * xs;  // packed x per m-block pair and k-step
  const int64_t max_steps = std::max(kChunkSteps, kXChunkBytes / (n_pairs * pair_step_bytes));
  const int64_t n_kc = (n_kb + max_steps - 1) / max_steps;
  const int64_t chunk_steps = (n_kb + n_kc - 1) / n_kc;
  // Balanced m-chunks of at most the L2 budget.
  const int64_t max_pairs = std::max<int64_t>(1, kXChunkBytes / (chunk_steps * pair_step_bytes));
  const int64_t n_mc = (n_pairs + max_pairs - 1) / max_pairs;
  const int64_t mc_pairs = (n_pairs + n_mc - 1) / n_mc;
  const AmxJob job{units.data(), &w, src, k, n_kb, n_mb, m, xs, stacked, xp.data(), ep, y, ldy,
                   chunk_steps, mc_pairs};

  // Prefill-sized x: a few unit ranges per thread, claimed dynamically, so a thread that runs
  // slower (a shared machine) takes fewer instead of the others waiting for its fixed share.
  // Batched decode keeps one range per thread: a range's first unit is packed without the
  // prefetch that the units after it get, which costs more next to short tile loops.
  const int64_t per_thread = n_pairs >= 4 ? 4 : 1;
  const int64_t n_chunks = std::min(threads * per_thread, n_units);
  const int64_t m_chunks = std::min((threads + n_chunks - 1) / n_chunks, n_pairs);
  runner.run(n_chunks * m_chunks, [&](int64_t t) {
    const int64_t nc = t % n_chunks, mc = t / n_chunks;
    const int64_t u0 = n_units * nc / n_chunks, u1 = n_units * (nc + 1) / n_chunks;
    const int64_t p0 = n_pairs * mc / m_chunks, p1 = n_pairs * (mc + 1) / m_chunks;
    if (u0 < u1 && p0 < p1) run_amx_task(job, u0, u1, p0, p1);
  });
}

}  // namespace

void gemm_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
              float* y, int64_t ldy, TaskRunner& runner) {
  run_gemm_amx(m, x, ldx, w, nullptr, ep, y, ldy, runner);
}

void gemm_amx_source(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                     const AmxPanelSource& src, GemmEpilogue ep, float* y, int64_t ldy,
                     TaskRunner& runner) {
  run_gemm_amx(m, x, ldx, w, &src, ep, y, ldy, runner);
}

}  // namespace sampan::cpu::gemm_detail

namespace sampan::cpu {

// Plain atomics only, so these are safe to call on CPUs without AVX-512 although this file is
// compiled for AMX.
GemmPrecision gemm_precision() {
  if (gemm_detail::t_scoped_precision >= 0) {
    return static_cast<GemmPrecision>(gemm_detail::t_scoped_precision);
  }
  return static_cast<GemmPrecision>(gemm_detail::precision_slot().load(std::memory_order_relaxed));
}

ScopedGemmPrecision::ScopedGemmPrecision(GemmPrecision p)
    : previous_(gemm_detail::t_scoped_precision) {
  gemm_detail::t_scoped_precision = static_cast<int>(p);
}

ScopedGemmPrecision::~ScopedGemmPrecision() { gemm_detail::t_scoped_precision = previous_; }

void set_gemm_precision(GemmPrecision p) {
  gemm_detail::precision_slot().store(static_cast<int>(p), std::memory_order_relaxed);
}

}  // namespace sampan::cpu
