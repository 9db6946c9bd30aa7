// Dispatch for cpu::gemm and the ISA-agnostic drivers of the FMA path (micro-kernels in
// gemm_avx2.cc / gemm_avx512.cc; the AMX path is all in gemm_amx.cc).
//
// Dispatch: bf16/f16 weights with m >= kAmxMinM on a CPU with AMX go to gemm_amx; everything
// else (every f32 weight) takes the FMA path of the active ISA, with the dot kernels below
// gemm_panel_min_m rows of x and the panel kernels from there (thresholds in gemm_internal.h).
//
// Dot driver (decode): the output columns are split into one contiguous chunk per worker, which
// walk_decode_columns (gemm_decode_walk.h) reads as R interleaved streams, in row-blocks of R
// weight rows, one per stream (kSiluMul: R/2 gate rows and the same R/2 up rows, so both halves
// of each output are ready together). Each row-block is multiplied with all m rows of x before
// moving on, so every weight byte comes from memory once per call: in one kernel call when a
// kernel table covers m, otherwise in k-chunks of kChunk columns, running every m-group over a
// chunk while its R rows sit in L1. When one call covers m = 5..8 rows of x but those rows
// outgrow L1 (more than kXGroupAbove bytes: TinyLlama's k = 2048 from m = 7 on, on a 48 KiB L1),
// each kernel call would stream x from L2 again; there 8 consecutive calls are handed over
// together and run k-chunk by k-chunk (at most kXL1Bytes of x each), so a chunk of x serves all
// 8 from L1. The sums run in the same order either way (same bits). Measured on Zen 5 (bf16
// TinyLlama, `sampan bench --batch`, alternating, 1 / 2 threads): a batch-8 step 165.6-168.6 ->
// 124.4-126.4 ms and 87.7-90.3 -> 67.0-67.9 ms, batch 7 1.16-1.2x, batch 6 1.03-1.08x; with the
// threshold at 16 KiB, batch 6 lost 7-10 %.
//
// Panel driver (prefill without AMX, or f32 weights): per panel of NR output columns and
// k-chunk, the weights are packed k-major once and every MR-row block of x runs against them;
// sums collect in a per-thread [m, NR] buffer that the epilogue reads. The same driver runs the
// f32 FMA panels and, on CPUs with AVX512-BF16 but no AMX, the vdpbf16ps panels
// (gemm_bf16_avx512.cc), whose x a task first converts to bf16 pairs (prefill_panel_kernels).
#include "kernels/cpu/gemm_cpu.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <vector>

#include "kernels/cpu/gemm_decode_walk.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/skinny_gemm_cpu.h"

namespace sampan::cpu {
namespace {

using gemm_detail::AlignedBuffer;
using gemm_detail::DotTable;
using gemm_detail::FmaKernels;
using gemm_detail::kMaxDotRows;
using gemm_detail::kMaxLanes;
using gemm_detail::PanelKernels;

constexpr int64_t kChunk = 512;  // k columns per chunk when x has several m-groups (x 32)
// Calls grouped over k-chunks (see the top of this file): from kXGroupMinM rows of x, when the
// rows of one task take more than kXGroupAbove bytes; chunks hold at most kXL1Bytes of x.
constexpr int64_t kXGroupAbove = 48 * 1024;
constexpr int64_t kXL1Bytes = 16 * 1024;
constexpr int kXGroup = 8;
constexpr int64_t kXGroupMinM = 5;
// Converting a row-block chunk to f32 once pays off when at least this many m-groups reuse it;
// below that the kernels convert in registers for free (they wait on memory anyway).
constexpr int64_t kPreconvertGroups = 3;

int dtype_index(DType t) {
  switch (t) {
    case DType::kF32: return gemm_detail::kDtF32;
    case DType::kF16: return gemm_detail::kDtF16;
    case DType::kBF16: return gemm_detail::kDtBF16;
    default: break;
  }
  return -1;
}

struct FmaJob {
  const FmaKernels* kt;
  const PanelKernels* pk;  // the panel kernels for m >= gemm_panel_min_m
  int dt;
  int64_t elem_bytes;
  int64_t m;
  const float* x;  // [m - x_row0, ldx]: row i of x is at x + (i - x_row0) * ldx
  int64_t ldx;
  int64_t x_row0;
  const GemmWeights* w;
  GemmEpilogue ep;
  float* y;  // [m, ldy]
  int64_t ldy;
};

// Per-thread scratch, grown on demand and kept: a decode step calls gemm hundreds of times.
struct FmaScratch {
  std::vector<float> acc;      // [m, R, kMaxLanes] partial sums between k-chunks
  std::vector<float> out;      // [m, R] finished dot products of one row-block
  std::vector<float> wf32;     // [R, kChunk] row-block chunk converted to f32
  AlignedBuffer<float> xpair;  // [m, round_up(k, 32)] x in the bf16 kernels' pair layout
};

FmaScratch& fma_scratch() {
  thread_local FmaScratch s;
  return s;
}

// Whether the dot kernels of this job read x in pair layout (FmaKernels::bf16_pair_x).
bool pair_layout(const FmaJob& job) {
  return job.dt == gemm_detail::kDtBF16 && job.kt->bf16_pair_x != nullptr;
}

// The kernel shape for mr rows of x: one pass over the weights whenever a table covers mr.
const DotTable& pick_table(const FmaKernels& kt, int64_t mr) {
  if (mr <= kt.narrow.max_m) return kt.narrow;
  if (mr >= kt.wide.min_m && (mr <= kt.wide.max_m || kt.group_on_wide)) return kt.wide;
  return kt.narrow;
}

// The m-groups dot_rows runs for mr rows of x on table t. A wide table (min_m > 1, reached
// through FmaKernels::group_on_wide) takes near-equal groups, which keeps each one at or above
// min_m (8 rows on AVX2: 4 + 4); a narrow table takes max_m rows per group and the rest last.
struct MGroups {
  int64_t n, mr, max_m;
  bool even;
  int64_t start(int64_t g) const { return even ? g * (mr / n) + std::min(g, mr % n) : g * max_m; }
  int64_t size(int64_t g) const {
    return even ? mr / n + (g < mr % n ? 1 : 0) : std::min(max_m, mr - g * max_m);
  }
};

MGroups split_m(const DotTable& t, int64_t mr) {
  return {(mr + t.max_m - 1) / t.max_m, mr, t.max_m, t.min_m > 1};
}

// out[(i - i0) * R + r] = x[i] · rows[r] for i in [i0, i1).
// rows: R pointers to weight rows of length k.
void dot_rows(const FmaJob& job, const DotTable& t, const void* const* rows, int64_t i0, int64_t i1,
              FmaScratch& s) {
  const FmaKernels& kt = *job.kt;
  const int64_t k = job.w->k;
  const int64_t mr = i1 - i0;
  const int R = t.rows;
  float* out = s.out.data();
  if (mr <= t.max_m) {
    t.dot[job.dt][mr](rows, job.x + (i0 - job.x_row0) * job.ldx, job.ldx, 0, k, s.acc.data(), true,
                      true, out);
    return;
  }
  const MGroups groups = split_m(t, mr);
  const int64_t n_groups = groups.n;
  // (Not with x in pair layout: f32 weights would not match it, and those bf16 kernels widen
  // weights with one ALU op per vector anyway.)
  const bool preconvert =
      job.dt != gemm_detail::kDtF32 && n_groups >= kPreconvertGroups && !pair_layout(job);
  const int dt = preconvert ? gemm_detail::kDtF32 : job.dt;
  for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
    const int64_t len = std::min(kChunk, k - c0);
    const void* chunk_rows[kMaxDotRows];
    for (int r = 0; r < R; ++r) {
      const char* src = static_cast<const char*>(rows[r]) + c0 * job.elem_bytes;
      if (preconvert) {
        float* dst = s.wf32.data() + r * kChunk;
        kt.to_f32(job.dt, src, dst, len);
        chunk_rows[r] = dst;
      } else {
        chunk_rows[r] = src;
      }
    }
    for (int64_t g = 0; g < n_groups; ++g) {
      const int64_t gi = groups.start(g);
      const int64_t mb = groups.size(g);
      t.dot[dt][mb](chunk_rows, job.x + (i0 + gi - job.x_row0) * job.ldx + c0, job.ldx, 0, len,
                    s.acc.data() + gi * R * kMaxLanes, c0 == 0, c0 + len == k, out + gi * R);
    }
  }
}

// Output columns [c0, c1) for rows [i0, i1).
void run_fma_task(const FmaJob& job, int64_t c0, int64_t c1, int64_t i0, int64_t i1) {
  FmaScratch& s = fma_scratch();
  const int64_t mr = i1 - i0;
  const DotTable& t = pick_table(*job.kt, mr);
  const int R = t.rows;
  if (static_cast<int64_t>(s.acc.size()) < mr * R * kMaxLanes) s.acc.resize(mr * R * kMaxLanes);
  if (static_cast<int64_t>(s.out.size()) < mr * R) s.out.resize(mr * R);
  if (s.wf32.size() < static_cast<size_t>(kMaxDotRows * kChunk))
    s.wf32.resize(kMaxDotRows * kChunk);

  // bf16 kernels that take x in pair layout get it here.
  FmaJob local = job;
  if (pair_layout(job)) {
    const int64_t ld = (job.w->k + 31) / 32 * 32;
    s.xpair.reserve(mr * ld);
    for (int64_t i = i0; i < i1; ++i) {
      job.kt->bf16_pair_x(job.x + (i - job.x_row0) * job.ldx, job.w->k,
                          s.xpair.data() + (i - i0) * ld);
    }
    local.x = s.xpair.data();
    local.ldx = ld;
    local.x_row0 = i0;
  }

  // The columns as R interleaved streams (gemm_decode_walk.h), all rows [i0, i1) of x per
  // kernel call (dot_rows groups them).
  const GemmWeights& w = *job.w;
  const int64_t row_bytes = w.k * job.elem_bytes;
  const gemm_detail::DecodeWalk walk{job.w, job.ep, job.kt->epilogue, R, static_cast<int>(mr),
                                     mr, job.y + i0 * job.ldy, job.ldy};
  auto row_of = [&](int b, int64_t r) -> const void* {
    return static_cast<const char*>(w.data[b]) + r * row_bytes;
  };
  const int64_t x_bytes = mr * w.k * static_cast<int64_t>(sizeof(float));
  if (mr < kXGroupMinM || mr > t.max_m || x_bytes <= kXGroupAbove) {
    gemm_detail::walk_decode_columns<const void*, kMaxDotRows, gemm_detail::kMaxDotWalkM>(
        walk, c0, c1, row_of, [&](const void* const* rows, int64_t, int, float* out) {
          dot_rows(local, t, rows, i0, i1, s);
          std::copy_n(s.out.data(), mr * R, out);
        });
    return;
  }
  // x too big for L1 next to the streaming weights: kXGroup calls at a time, k in chunks
  // outermost, so each chunk of x is read from L2 once per kXGroup calls instead of once per
  // call. The partial sums wait in acc between chunks (the kernels' begin / end contract);
  // chunks are equal multiples of 32 (that contract), each at most kXL1Bytes of x.
  const int64_t n_chunks = (x_bytes + kXL1Bytes - 1) / kXL1Bytes;
  const int64_t kx = ((w.k + n_chunks - 1) / n_chunks + 31) / 32 * 32;
  const int64_t acc_per_call = mr * R * kMaxLanes;
  if (static_cast<int64_t>(s.acc.size()) < kXGroup * acc_per_call) s.acc.resize(kXGroup * acc_per_call);
  const float* xr = local.x + (i0 - local.x_row0) * local.ldx;
  constexpr int kOutStride = gemm_detail::kMaxDotWalkM * kMaxDotRows;  // the walk's out[n][...]
  gemm_detail::walk_decode_columns<const void*, kMaxDotRows, gemm_detail::kMaxDotWalkM, kXGroup>(
      walk, c0, c1, row_of, [&](const void* const (*rows)[kMaxDotRows], int n, int64_t, int, float* out) {
        for (int64_t k0 = 0; k0 < w.k; k0 += kx) {
          const int64_t k1 = std::min(w.k, k0 + kx);
          for (int q = 0; q < n; ++q) {
            t.dot[job.dt][mr](rows[q], xr, local.ldx, k0, k1, s.acc.data() + q * acc_per_call,
                              k0 == 0, k1 == w.k, out + q * kOutStride);
          }
        }
      });
}

// Per-thread scratch of the panel kernels.
struct PanelScratch {
  AlignedBuffer<float> panel;  // [kc, NR]
  AlignedBuffer<float> c;      // [m rows of the task, NR] sums of one column panel
  AlignedBuffer<float> x;      // [m rows of the task, ...] x converted by PanelKernels::prep_x
};

PanelScratch& panel_scratch() {
  thread_local PanelScratch s;
  return s;
}

// Output columns [c0, c1) for rows [i0, i1) with the panel kernels: per panel of NR output
// columns (kSiluMul: NR/2 gate rows and their NR/2 up rows), per k-chunk, pack once and run
// every MR-row block of x against it; the epilogue reads the finished sums.
void run_panel_task(const FmaJob& job, int64_t c0, int64_t c1, int64_t i0, int64_t i1) {
  const PanelKernels& pk = *job.pk;
  const GemmWeights& w = *job.w;
  const bool silu = job.ep == GemmEpilogue::kSiluMul;
  const int nr = pk.nr;
  const int per_panel = silu ? nr / 2 : nr;
  const int64_t mr = i1 - i0;
  PanelScratch& s = panel_scratch();
  s.panel.reserve(pk.kc * nr);
  s.c.reserve(mr * nr);
  // x as the kernels read it: row i at x + (i - x_row0) * ldx.
  const float* x = job.x;
  int64_t ldx = job.ldx, x_row0 = job.x_row0;
  if (pk.prep_x != nullptr) {
    ldx = (w.k + 31) / 32 * 16 * pk.x_per_pair;
    s.x.reserve(mr * ldx);
    for (int64_t i = i0; i < i1; ++i) {
      pk.prep_x(job.x + (i - job.x_row0) * job.ldx, w.k, s.x.data() + (i - i0) * ldx);
    }
    x = s.x.data();
    x_row0 = i0;
  }
  const int64_t row_bytes = w.k * job.elem_bytes;
  const void* rows[gemm_detail::kMaxPanelNr];
  const int n_segments = silu ? 1 : w.n_blocks;
  int64_t base = 0;  // first output column of the current block
  // The weight rows of the panel at output column col of segment b (null past hi).
  auto fill_rows = [&](int b, int64_t col, int64_t hi, int64_t seg_base, const void** out) {
    const int64_t nc = std::min<int64_t>(per_panel, hi - col);
    const int64_t r0 = col - seg_base;
    for (int j = 0; j < per_panel; ++j) {
      const int64_t off = (r0 + j) * row_bytes;
      if (silu) {
        out[j] = j < nc ? static_cast<const char*>(w.data[0]) + off : nullptr;
        out[per_panel + j] = j < nc ? static_cast<const char*>(w.data[1]) + off : nullptr;
      } else {
        out[j] = j < nc ? static_cast<const char*>(w.data[b]) + off : nullptr;
      }
    }
  };
  const void* next_rows[gemm_detail::kMaxPanelNr];
  RowsPrefetch prefetch;
  const int64_t kernel_calls = (mr + pk.mr - 1) / pk.mr;
  for (int b = 0; b < n_segments; ++b) {
    const int64_t lo = std::max(c0, base), hi = std::min(c1, base + w.rows[b]);
    for (int64_t col = lo; col < hi; col += per_panel) {
      const int64_t nc = std::min<int64_t>(per_panel, hi - col);
      const int64_t r0 = col - base;
      fill_rows(b, col, hi, base, rows);
      // A whole panel of plain outputs (no bias, no SiLU-mul) over a single k-chunk goes
      // straight into y: the kernels write nr columns at any row stride, and the epilogue would
      // only copy them. (Over several k-chunks the sums stay in the compact buffer, in L1,
      // instead of being read back from rows of y far apart once per chunk.)
      const bool direct = !silu && w.bias[b] == nullptr && nc == nr && w.k <= pk.kc;
      float* const cbase = direct ? job.y + i0 * job.ldy + base + r0 : s.c.data();
      const int64_t ldc = direct ? job.ldy : nr;
      for (int64_t kk = 0; kk < w.k; kk += pk.kc) {
        const int64_t len = std::min(pk.kc, w.k - kk);
        pk.pack(job.dt, rows, kk, len, s.panel.data());
        // While the tiles run, the next chunk's rows come into L2: the rest of these rows, or
        // the next panel's first chunk.
        if (kk + pk.kc < w.k) {
          prefetch.start(rows, (kk + pk.kc) * job.elem_bytes, nr,
                         std::min(pk.kc, w.k - kk - pk.kc) * job.elem_bytes, kernel_calls);
        } else if (col + per_panel < hi) {
          fill_rows(b, col + per_panel, hi, base, next_rows);
          prefetch.start(next_rows, 0, nr, std::min(pk.kc, w.k) * job.elem_bytes, kernel_calls);
        } else {
          prefetch.stop();
        }
        for (int64_t i = i0; i < i1; i += pk.mr) {
          prefetch.step();
          pk.kernel(x + (i - x_row0) * ldx + kk / 2 * pk.x_per_pair, ldx,
                    std::min<int64_t>(pk.mr, i1 - i), s.panel.data(), len,
                    cbase + (i - i0) * ldc, ldc, kk > 0);
        }
      }
      if (direct) continue;
      for (int64_t i = i0; i < i1; ++i) {
        const float* c = s.c.data() + (i - i0) * nr;
        float* yrow = job.y + i * job.ldy + base + r0;
        if (silu) {
          job.kt->epilogue(GemmEpilogue::kSiluMul, c, w.bias[0] ? w.bias[0] + r0 : nullptr,
                           c + per_panel, w.bias[1] ? w.bias[1] + r0 : nullptr, yrow, nc);
        } else {
          job.kt->epilogue(GemmEpilogue::kStore, c, w.bias[b] ? w.bias[b] + r0 : nullptr, nullptr,
                           nullptr, yrow, nc);
        }
      }
    }
    base += w.rows[b];
  }
}

void gemm_fma(const FmaKernels& kt, int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
              GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  const int dt = dtype_index(w.dtype);
  const bool panel = m >= gemm_detail::gemm_panel_min_m(kt, dt);
  const PanelKernels& pk = panel ? gemm_detail::prefill_panel_kernels(kt, dt) : kt.panel;
  const FmaJob job{&kt, &pk, dt, dt == gemm_detail::kDtF32 ? 4 : 2, m, x, ldx, 0, &w, ep, y, ldy};
  const int64_t n_out = ep == GemmEpilogue::kSiluMul ? w.rows[0] : w.n();
  const int64_t cols = panel ? pk.nr : kt.narrow.rows;  // weight rows per kernel call
  const int64_t granule = ep == GemmEpilogue::kSiluMul ? cols / 2 : cols;
  const int64_t units = (n_out + granule - 1) / granule;
  const int64_t threads = std::max(1, runner.concurrency());
  // Decode wants one contiguous column chunk per thread; only when there are fewer column
  // units than threads (tiny n, large m) is m split as well.
  const int64_t n_chunks = std::min(threads, units);
  const int64_t m_per_group = panel ? pk.mr : kt.narrow.max_m;
  const int64_t m_groups = (m + m_per_group - 1) / m_per_group;
  const int64_t m_chunks = std::min((threads + n_chunks - 1) / n_chunks, m_groups);
  auto task = [&](int64_t t) {
    const int64_t nc = t % n_chunks, mc = t / n_chunks;
    const int64_t c0 = std::min(n_out, units * nc / n_chunks * granule);
    const int64_t c1 = std::min(n_out, units * (nc + 1) / n_chunks * granule);
    const int64_t g0 = m_groups * mc / m_chunks, g1 = m_groups * (mc + 1) / m_chunks;
    const int64_t i0 = g0 * m_per_group, i1 = std::min(m, g1 * m_per_group);
    if (c0 >= c1 || i0 >= i1) return;
    if (panel) {
      run_panel_task(job, c0, c1, i0, i1);
    } else {
      run_fma_task(job, c0, c1, i0, i1);
    }
  };
  const int64_t n_tasks = n_chunks * m_chunks;
  if (n_tasks == 1) {
    task(0);
  } else {
    runner.run(n_tasks, task);
  }
}

}  // namespace

namespace {
std::atomic<int> g_bf16_panels_policy{static_cast<int>(Bf16PanelsPolicy::kAuto)};
}  // namespace

Bf16PanelsPolicy bf16_panels_policy() {
  return static_cast<Bf16PanelsPolicy>(g_bf16_panels_policy.load(std::memory_order_relaxed));
}

void set_bf16_panels_policy(Bf16PanelsPolicy p) {
  g_bf16_panels_policy.store(static_cast<int>(p), std::memory_order_relaxed);
}

bool bf16_panels_preferred() {
  if (!has_avx512_bf16()) return false;
  switch (bf16_panels_policy()) {
    case Bf16PanelsPolicy::kOn: return true;
    case Bf16PanelsPolicy::kOff: return false;
    case Bf16PanelsPolicy::kAuto: break;
  }
  return !cpu_features().dpbf16_half_rate;
}

namespace gemm_detail {

const PanelKernels& prefill_panel_kernels(const FmaKernels& kt, int dt) {
  // AMX CPUs run 16-bit weights on tiles (except with kF32, which takes kt.panel below). f32
  // weights stay f32 at every precision, as on AMX: the weights' dtype is the caller's accuracy
  // choice, and GemmPrecision is about x.
  if (dt == kDtF32 || !bf16_panels_preferred() || has_amx() ||
      gemm_precision() != GemmPrecision::kBf16)
    return kt.panel;
  return bf16_panel_kernels();
}

int64_t gemm_panel_min_m(const FmaKernels& kt, int dt) {
  const bool f32_panels = &prefill_panel_kernels(kt, dt) == &kt.panel;
  return f32_panels && dt != kDtF32 ? kt.panel_min_m_16bit : kPanelMinM;
}

bool prefill_in_bf16() {
  const GemmPrecision p = gemm_precision();
  if (p == GemmPrecision::kF32) return false;
  return has_amx() || (bf16_panels_preferred() && p == GemmPrecision::kBf16);
}

}  // namespace gemm_detail

namespace {

// gemm()'s choice of gemm_amx for 16-bit weights: AMX tiles pay off from kAmxMinM rows; below
// that, for f32 weights and with kF32, the AVX-512 FMA kernels stream the weights (they need
// only AVX-512 F/BW/VL/DQ, so Zen 4 runs them too).
bool takes_amx(int64_t m, DType dtype) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && has_amx() &&
         m >= gemm_detail::kAmxMinM && gemm_precision() != GemmPrecision::kF32;
}

}  // namespace

bool gemm_rounds_x_to_bf16(int64_t m, const GemmWeights& w) {
  // gemm_amx's kBf16 packing is _mm512_cvtneps_pbh.
  return takes_amx(m, w.dtype) && gemm_precision() == GemmPrecision::kBf16;
}

void gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue epilogue,
          float* y, int64_t ldy, TaskRunner& runner) {
  if (m <= 0) return;
  if (w.dtype == DType::kU8) {  // GGUF block types: gemm_ggml_cpu.cc
    gemm_detail::gemm_ggml(m, x, ldx, w, epilogue, y, ldy, runner);
    return;
  }
  if (w.dtype == DType::kF8E4M3 || w.dtype == DType::kI4) {  // quantized: gemm_quant_cpu.cc
    gemm_detail::gemm_quant(m, x, ldx, w, epilogue, y, ldy, runner);
    return;
  }
  const int dt = dtype_index(w.dtype);
  assert(dt >= 0 && "gemm: weight dtype must be f32, f16 or bf16");
  assert(w.n_blocks >= 1 && w.n_blocks <= kMaxGemmBlocks && w.k >= 1 && ldx >= w.k);
  assert(epilogue == GemmEpilogue::kStore || (w.n_blocks == 2 && w.rows[0] == w.rows[1]));
  if (dt < 0) return;
  // f32 weights with at most kSkinnyMax output columns (a LoRA adapter's x·Aᵀ): one dot product
  // per output on rows of x split over the workers, where the panels pad the columns to a whole
  // panel and run one task (skinny_gemm_cpu.h; 0.27 -> 0.03 ms at m = 256, r = 8, k = 2048).
  if (dt == gemm_detail::kDtF32 && epilogue == GemmEpilogue::kStore && w.n() <= kSkinnyMax &&
      m >= gemm_detail::kPanelMinM) {
    int64_t col = 0;
    for (int b = 0; b < w.n_blocks; ++b) {
      skinny_n_gemm(m, w.rows[b], w.k, x, ldx, static_cast<const float*>(w.data[b]), w.k,
                    w.bias[b], y + col, ldy, runner);
      col += w.rows[b];
    }
    return;
  }
  if (takes_amx(m, w.dtype)) {
    gemm_detail::gemm_amx(m, x, ldx, w, epilogue, y, ldy, runner);
    return;
  }
  const FmaKernels& kt =
      has_avx512() ? gemm_detail::fma_kernels_avx512() : gemm_detail::fma_kernels_avx2();
  gemm_fma(kt, m, x, ldx, w, epilogue, y, ldy, runner);
}

}  // namespace sampan::cpu
