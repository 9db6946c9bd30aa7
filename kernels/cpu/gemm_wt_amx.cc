// dX = dY · W for bf16 W [n, k] (training's input gradient of a linear layer) on AMX-BF16 tiles,
// W read in place. The forward GEMM (gemm_amx.cc) takes W as the A operand, 16 of its rows per
// tile, which is how W lies; here the reduction runs down W's columns, and taking W as the A
// operand would need a transpose of 32-byte pieces of 32 rows per tile, a strip read with
// W's row stride that neither the hardware prefetcher nor L2 (a 2^n stride maps the strip to
// a few sets) serves well: measured slower than matmul_bf16's tiles. So the roles swap:
// C [16 rows of dY, 16 columns of W] += A (16 rows of dY x 32 of n) · B (32 rows of W x 16
// columns in tdpbf16ps's pair layout: pair row p holds (W[2p][c], W[2p + 1][c])). B needs only
// row pairs interleaved, not a transpose, and a panel of B tiles is packed from pieces of
// kCbUnits * 64 bytes of each W row, read in row order; C is dX's own layout, stored straight.
//
// Blocking. dY is packed once per call into A tiles (bf16, or hi + lo parts). Tasks are ranges
// of whole panels' 32-column units of dX, four per thread, claimed dynamically (a thread that a
// shared machine slows takes fewer). Per task: m in chunks whose packed dY for one
// reduction chunk stays in L2 (kABudget); per chunk, units in blocks of kCbUnits and the
// reduction in chunks of up to kMaxChunkSteps * 32 rows of W; each (unit block, reduction
// chunk) packs one panel (<= 512 KiB, L2) that every m-block pair of the m-chunk reuses; the
// four C tiles of a (unit, pair) live in tile registers across a chunk and go to a per-thread
// f32 buffer between chunks. A thread reads W once per m-chunk (once for training's sizes).
//
// Not kept (bf16 LoRA steps on an Emerald Rapids VM, dX time against the forward's): packing
// the next panel a step at a time between the current panel's tile steps (1.33-1.42x against
// 1.26-1.28x), and prefetching the next panel into L2 during them, with panels of 4 to 16 units
// over 16 to 64 steps (within the noise).
//
// Precision: every product of two bf16 numbers is exact in f32; sums in f32. dY as
// gemm_precision() says (gemm_internal.h).
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized (fixed in GCC 13); silenced before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm_internal.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int64_t kTileElems = 512;      // bf16 elements in one 16 x 32 tile
constexpr int64_t kMaxChunkSteps = 64;   // reduction steps (32 rows of W) per chunk
constexpr int64_t kCbUnits = 4;          // 32-column units per panel
constexpr int64_t kABudget = 1 << 20;    // packed dY of one m-chunk and reduction chunk (L2)
constexpr int64_t kPrefetchSteps = 2;    // W rows prefetched this many steps ahead of the pack
constexpr int64_t kTasksPerThread = 4;   // unit ranges per thread, claimed dynamically

// W's rows by reduction step: step s covers rows [32 s, 32 s + 32) of the stacked W, in one
// block (the caller's precondition).
struct Steps {
  std::vector<const uint16_t*> row;  // [n_kb]: the step's first row
  std::vector<int32_t> rows;         // [n_kb]: its rows (32; fewer at the very end)
};

inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// Rows [16 mb, 16 mb + 16) of dY as A tiles, xs per step (1: bf16; 2: hi then lo); rows >= m
// and columns >= n zero. x: [m, ldx] f32; out: [n_kb, xs, 16, 32] bf16.
void pack_dy(const float* x, int64_t ldx, int64_t m, int64_t n, int64_t mb, int64_t n_kb,
             int64_t xs, uint16_t* out) {
  for (int64_t kb = 0; kb < n_kb; ++kb) {
    const int64_t c = kb * 32;
    const __mmask16 lo = mask16(n - c), hi = mask16(n - c - 16);
    uint16_t* t = out + kb * xs * kTileElems;
    for (int i = 0; i < 16; ++i) {
      const int64_t row = mb * 16 + i;
      __m512i h = _mm512_setzero_si512(), l = _mm512_setzero_si512();
      if (row < m) {
        const float* p = x + row * ldx + c;
        const __m512 v0 = _mm512_maskz_loadu_ps(lo, p), v1 = _mm512_maskz_loadu_ps(hi, p + 16);
        const __m256bh h0 = _mm512_cvtneps_pbh(v0), h1 = _mm512_cvtneps_pbh(v1);
        h = amx::concat_bf16(h0, h1);
        if (xs == 2) {
          l = amx::concat_bf16(_mm512_cvtneps_pbh(amx::bf16_residual(v0, h0)),
                                _mm512_cvtneps_pbh(amx::bf16_residual(v1, h1)));
        }
      }
      _mm512_store_si512(t + i * 32, h);
      if (xs == 2) _mm512_store_si512(t + kTileElems + i * 32, l);
    }
  }
}

// B tiles of W rows for steps [kb0, kb1) and columns [col0, col0 + 32 units): panel
// [units, kb1 - kb0, 2, 16, 32] bf16, tile (u, s, ct) pair row p = (W[2p][c], W[2p + 1][c]) for
// the 16 columns c of half ct; rows past W and columns >= k zero. Each W row is read as one
// piece of units * 64 bytes.
void pack_w(const Steps& st, int64_t k, int64_t kb0, int64_t kb1, int64_t col0, int64_t units,
            uint16_t* panel) {
  // Element j of a pair row: j even from the even row, j odd from the odd row (index bit 5
  // picks the second source); the second half of the columns adds 16.
  alignas(64) static constexpr uint16_t kLo[32] = {
      0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {
      16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i ilo = _mm512_load_si512(kLo), ihi = _mm512_load_si512(kHi);
  const int64_t steps = kb1 - kb0;
  const int64_t piece = std::min(units * 32, k - col0) * 2;  // bytes of each row read
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    // The rows of the step kPrefetchSteps ahead, a pair per pair packed: spread out, the
    // prefetches do not fill the line fill buffers in a burst.
    const char* ahead = kb + kPrefetchSteps < kb1
                            ? reinterpret_cast<const char*>(st.row[kb + kPrefetchSteps] + col0)
                            : nullptr;
    const int ahead_rows = ahead ? st.rows[kb + kPrefetchSteps] : 0;
    const uint16_t* w = st.row[kb] + col0;
    const int rows = st.rows[kb];
    for (int p = 0; p < 16; ++p) {
      for (int r = 2 * p; r < std::min(2 * p + 2, ahead_rows); ++r) {
        const char* q = ahead + r * k * 2;
        for (int64_t b = 0; b < piece; b += 64) _mm_prefetch(q + b, _MM_HINT_T1);
        _mm_prefetch(q + piece - 1, _MM_HINT_T1);
      }
      const uint16_t* r0 = w + 2 * p * k;
      const uint16_t* r1 = r0 + k;
      for (int64_t u = 0; u < units; ++u) {
        const __mmask32 cm = mask32(k - col0 - 32 * u);
        const __m512i a = 2 * p < rows ? _mm512_maskz_loadu_epi16(cm, r0 + 32 * u)
                                       : _mm512_setzero_si512();
        const __m512i b = 2 * p + 1 < rows ? _mm512_maskz_loadu_epi16(cm, r1 + 32 * u)
                                           : _mm512_setzero_si512();
        uint16_t* t = panel + ((u * steps + (kb - kb0)) * 2) * kTileElems + p * 32;
        _mm512_store_si512(t, _mm512_permutex2var_epi16(a, ilo, b));
        _mm512_store_si512(t + kTileElems, _mm512_permutex2var_epi16(a, ihi, b));
      }
    }
  }
}

// C tiles: tmm0 = (m-block 0, columns 0..15), tmm1 = (0, 16..31), tmm2/3 = m-block 1.
// C += A · B over `steps` steps. a0/a1: the m-blocks' A tiles at the first step (xs * 512 apart
// per step; kSplit: hi then lo); b: [steps, 2, 16, 32].
template <int NB, bool kSplit>
void tile_loop(const uint16_t* a0, const uint16_t* a1, const uint16_t* b, int64_t steps) {
  constexpr int64_t kA = (kSplit ? 2 : 1) * kTileElems;
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(6, b + s * 2 * kTileElems, 64);
    _tile_loadd(4, a0 + s * kA, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b + s * 2 * kTileElems + kTileElems, 64);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (NB == 2) {
      _tile_loadd(5, a1 + s * kA, 64);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    if constexpr (kSplit) {
      _tile_loadd(4, a0 + s * kA + kTileElems, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      if constexpr (NB == 2) {
        _tile_loadd(5, a1 + s * kA + kTileElems, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
}

void run_tiles(int NB, bool split, const uint16_t* a0, const uint16_t* a1, const uint16_t* b,
               int64_t steps) {
  if (NB == 2) {
    split ? tile_loop<2, true>(a0, a1, b, steps) : tile_loop<2, false>(a0, a1, b, steps);
  } else {
    split ? tile_loop<1, true>(a0, a1, b, steps) : tile_loop<1, false>(a0, a1, b, steps);
  }
}

// _tile_stored names its tile in the instruction.
inline void store_tile_reg(int t, void* dst, int64_t stride) {
  switch (t) {
    case 0: _tile_stored(0, dst, stride); break;
    case 1: _tile_stored(1, dst, stride); break;
    case 2: _tile_stored(2, dst, stride); break;
    default: _tile_stored(3, dst, stride); break;
  }
}

// Each f32 rounded to the nearest bf16 (ties to even) and back, round_bf16_cpu.cc's rule in
// integer lanes, bit for bit: add 0x7fff plus the kept part's lowest bit, drop the low half; a
// NaN keeps its top half with the quiet bit set.
inline __m512i round_bf16x16(__m512i u) {
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_and_si512(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), hi_mask);
  const __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi_mask);
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

// Tile t to y rows [row0, row0 + 16) x columns [col, col + 16), clipped to m x k; `round`:
// each value rounded to bf16 first.
void store_tile(int t, float* y, int64_t ldy, int64_t row0, int64_t col, int64_t m, int64_t k,
                bool round) {
  const int64_t rows = std::min<int64_t>(16, m - row0), cols = std::min<int64_t>(16, k - col);
  if (rows <= 0 || cols <= 0) return;
  float* dst = y + row0 * ldy + col;
  if (rows == 16 && cols == 16 && !round) {
    store_tile_reg(t, dst, ldy * 4);
    return;
  }
  alignas(64) float c[256];
  store_tile_reg(t, c, 64);
  const __mmask16 cm = mask16(cols);
  for (int64_t i = 0; i < rows; ++i) {
    __m512i v = _mm512_load_si512(c + i * 16);
    if (round) v = round_bf16x16(v);
    _mm512_mask_storeu_epi32(dst + i * ldy, cm, v);
  }
}

struct Job {
  const Steps* st;
  int64_t m, k, n_kb, n_mb, xs;
  const uint16_t* xp;  // [n_mb, n_kb, xs, 16, 32]
  float* y;
  int64_t ldy;
  int64_t chunk_steps, mc_pairs;
  bool round_y;
};

struct Scratch {
  AlignedBuffer<uint16_t> panel;  // [kCbUnits, chunk_steps, 2, 16, 32]
  AlignedBuffer<float> acc;       // [kCbUnits, mc_pairs, 4, 16, 16]
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Units [u0, u1) (32 columns of dX each) for every row of dY.
void run_task(const Job& job, int64_t u0, int64_t u1) {
  Scratch& s = scratch();
  const int64_t n_kc = (job.n_kb + job.chunk_steps - 1) / job.chunk_steps;
  s.panel.reserve(kCbUnits * job.chunk_steps * 2 * kTileElems);
  if (n_kc > 1) s.acc.reserve(kCbUnits * job.mc_pairs * 1024);
  const int64_t n_pairs = (job.n_mb + 1) / 2;
  const bool split = job.xs == 2;
  amx::configure_tiles();
  for (int64_t pc = 0; pc < n_pairs; pc += job.mc_pairs) {
    const int64_t pe = std::min(n_pairs, pc + job.mc_pairs);
    for (int64_t cb = u0; cb < u1; cb += kCbUnits) {
      const int64_t cu = std::min(kCbUnits, u1 - cb);
      for (int64_t kc = 0; kc < n_kc; ++kc) {
        const int64_t kb0 = kc * job.n_kb / n_kc, kb1 = (kc + 1) * job.n_kb / n_kc;
        const int64_t steps = kb1 - kb0;
        pack_w(*job.st, job.k, kb0, kb1, cb * 32, cu, s.panel.data());
        for (int64_t u = 0; u < cu; ++u) {
          const uint16_t* b = s.panel.data() + u * steps * 2 * kTileElems;
          const int64_t col = (cb + u) * 32;
          for (int64_t p = pc; p < pe; ++p) {
            const int64_t mb = 2 * p;
            const int NB = mb + 1 < job.n_mb ? 2 : 1;
            float* acc = n_kc > 1 ? s.acc.data() + (u * job.mc_pairs + (p - pc)) * 1024 : nullptr;
            if (kc == 0) {
              amx::zero_c4();
            } else {
              amx::load_c4(acc);
            }
            const uint16_t* a0 = job.xp + (mb * job.n_kb + kb0) * job.xs * kTileElems;
            const uint16_t* a1 = a0 + job.n_kb * job.xs * kTileElems;
            run_tiles(NB, split, a0, a1, b, steps);
            if (kc + 1 < n_kc) {
              amx::store_c4(acc);
              continue;
            }
            const int64_t r0 = mb * 16;
            store_tile(0, job.y, job.ldy, r0, col, job.m, job.k, job.round_y);
            store_tile(1, job.y, job.ldy, r0, col + 16, job.m, job.k, job.round_y);
            if (NB == 2) {
              store_tile(2, job.y, job.ldy, r0 + 16, col, job.m, job.k, job.round_y);
              store_tile(3, job.y, job.ldy, r0 + 16, col + 16, job.m, job.k, job.round_y);
            }
          }
        }
      }
    }
  }
  _tile_release();
}

AlignedBuffer<uint16_t>& packed_dy() {
  thread_local AlignedBuffer<uint16_t> xp;
  return xp;
}

}  // namespace

void gemm_amx_wt(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
                 int64_t ldy, TaskRunner& runner, bool round_y) {
  const int64_t k = w.k, n = w.n();
  if (m <= 0 || k <= 0) return;
  Steps st;
  for (int b = 0; b < w.n_blocks; ++b) {
    const auto* data = static_cast<const uint16_t*>(w.data[b]);
    for (int64_t r = 0; r < w.rows[b]; r += 32) {
      st.row.push_back(data + r * k);
      st.rows.push_back(static_cast<int32_t>(std::min<int64_t>(32, w.rows[b] - r)));
    }
  }
  const int64_t n_kb = static_cast<int64_t>(st.row.size());
  if (n_kb == 0) {  // n = 0: dX is zero
    for (int64_t i = 0; i < m; ++i) std::fill(y + i * ldy, y + i * ldy + k, 0.0f);
    return;
  }
  const int64_t n_mb = (m + 15) / 16, n_pairs = (n_mb + 1) / 2;
  const int64_t xs = gemm_precision() == GemmPrecision::kSplitBf16 ? 2 : 1;
  const int64_t threads = std::max(1, runner.concurrency());

  AlignedBuffer<uint16_t>& xp = packed_dy();
  xp.reserve(n_mb * n_kb * xs * kTileElems);
  const int64_t pack_tasks = std::min(threads, n_mb);
  runner.run(pack_tasks, [&](int64_t t) {
    for (int64_t mb = n_mb * t / pack_tasks; mb < n_mb * (t + 1) / pack_tasks; ++mb) {
      pack_dy(x, ldx, m, n, mb, n_kb, xs, xp.data() + mb * n_kb * xs * kTileElems);
    }
  });

  const int64_t n_kc = (n_kb + kMaxChunkSteps - 1) / kMaxChunkSteps;
  const int64_t chunk_steps = (n_kb + n_kc - 1) / n_kc;
  const int64_t pair_chunk_bytes = chunk_steps * 2 * xs * kTileElems * 2;
  const int64_t max_pairs = std::max<int64_t>(1, kABudget / pair_chunk_bytes);
  const int64_t n_mc = (n_pairs + max_pairs - 1) / max_pairs;
  const Job job{&st, m, k, n_kb, n_mb, xs, xp.data(), y, ldy, chunk_steps,
                (n_pairs + n_mc - 1) / n_mc, round_y};
  // A few panels' worth of units per task, claimed dynamically: a thread that runs slower (a
  // shared machine) takes fewer, instead of the others waiting for its fixed half.
  const int64_t n_units = (k + 31) / 32;
  const int64_t n_blocks = (n_units + kCbUnits - 1) / kCbUnits;
  const int64_t tasks = std::min(n_blocks, threads * kTasksPerThread);
  runner.run(tasks, [&](int64_t t) {
    run_task(job, std::min(n_units, n_blocks * t / tasks * kCbUnits),
             std::min(n_units, n_blocks * (t + 1) / tasks * kCbUnits));
  });
}

}  // namespace sampan::cpu::gemm_detail
