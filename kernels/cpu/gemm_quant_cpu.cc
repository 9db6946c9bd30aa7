// Driver of cpu::gemm for quantized weights (kF8E4M3, kI4); kernels in gemm_quant_avx512.cc and
// gemm_quant_avx2.cc, contract in gemm_quant.h.
//
// Decode (m < kQuantPrefillMinM): x is prepared once by the calling thread into the kernel
// table's layout (kI4 always; kF8E4M3 where the table has prep_f8, else x is read as it is),
// then the output columns are split into one contiguous range per worker, which
// walk_decode_columns (gemm_decode_walk.h) reads as R interleaved streams: each kernel call takes
// R weight rows, one per stream (kSiluMul: R/2 gate rows and the same R/2 up rows), and runs every
// m-group of x against them while they sit in L1, so the packed weights and scales stream from
// memory once. Nothing is dequantized to memory.
//
// Prefill (m >= kQuantPrefillMinM): output rows are taken in chunks of at most kDequantBytes of
// dequantized weights (bf16 on AMX CPUs, exact f32 otherwise); all workers dequantize a chunk,
// then the plain gemm() runs on it (AMX tiles, or the FMA panel kernels), with the chunk's biases
// and epilogue, writing its columns of y. We chose this over AMX-INT8: that would round x to
// int8 per row (~2^-8 relative, and worse with outlier channels), far from the 2^-16 the bf16
// split path keeps, and the dequantization is a small fraction of the work from m = 16 on.
// Without AMX, int4 prefill on AVX512-VNNI runs in integers instead (x rounded per group to 16
// bits, as at decode; gemm_prefill_int_avx512_vnni.cc): 2.2x the dequantize-to-f32 path
// there, which multiplies on the f32 FMA panels.
#include <algorithm>
#include <atomic>
#include <cassert>
#include <vector>

#include "kernels/cpu/gemm_decode_walk.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int64_t kDequantBytes = 16 << 20;  // dequantized weights per prefill chunk
constexpr int kMaxQuantM = 16;              // largest max_m of any table

QuantFormat format_of(const GemmWeights& w) {
  QuantFormat f;
  f.dtype = w.dtype;
  f.k = w.k;
  if (w.dtype == DType::kI4) {
    f.group = w.group_size;
    f.bf16_scales = w.scale_dtype == DType::kBF16;
    for (int b = 0; b < w.n_blocks; ++b) f.asymmetric |= w.zeros[b] != nullptr;
  }
  return f;
}

// Strides of a block's rows, computed once per call: a decode task locates R rows per kernel
// call, and 64-bit divisions there measured ~15 % of a call for int4 k = 2048.
struct RowStrides {
  int64_t data = 0;    // bytes
  int64_t scales = 0;  // kI4: scales and zeros per row (k / group); kF8E4M3: 1 (f32)
};

RowStrides strides_of(const QuantFormat& f) {
  return f.dtype == DType::kI4 ? RowStrides{f.k / 2, f.k / f.group} : RowStrides{f.k, 1};
}

QuantRow row_of(const GemmWeights& w, const QuantFormat& f, const RowStrides& st, int b,
                int64_t r) {
  QuantRow q;
  q.data = static_cast<const uint8_t*>(w.data[b]) + r * st.data;
  if (f.dtype == DType::kI4) {
    q.scales = static_cast<const uint16_t*>(w.scales[b]) + r * st.scales;
    q.zeros = w.zeros[b] ? w.zeros[b] + r * st.scales : nullptr;
  } else {
    q.scales = static_cast<const float*>(w.scales[b]) + r;
  }
  return q;
}

struct DecodeJob {
  const QuantKernels* kt;
  const QuantDotTable* t;
  QuantFormat f;
  RowStrides strides;
  const GemmWeights* w;
  GemmEpilogue ep;
  int64_t m;
  const float* x;  // [m, ldx]: raw (kF8E4M3) or prepared (kI4)
  int64_t ldx;
  float* y;  // [m, ldy]
  int64_t ldy;
};

// Output columns [c0, c1).
void run_decode_task(const DecodeJob& job, int64_t c0, int64_t c1) {
  const QuantDotTable& t = *job.t;
  const bool i4 = job.f.dtype == DType::kI4;
  const DecodeWalk walk{job.w, job.ep, job.kt->epilogue, t.rows, t.max_m, job.m, job.y, job.ldy};
  const QuantDotFn dot = t.resolve != nullptr ? t.resolve(job.f) : t.dot;
  walk_decode_columns<QuantRow, kMaxQuantRows, kMaxQuantM>(
      walk, c0, c1,
      [&](int b, int64_t r) { return row_of(*job.w, job.f, job.strides, b, r); },
      [&](const QuantRow* rows, int64_t i0, int mb, float* out) {
        if (i4 && i0 == 0) prefetch_i4_scales(rows, t.rows, job.strides.scales);
        dot(rows, job.f, QuantX{mb, job.x + i0 * job.ldx, job.ldx}, out);
      });
}

// Scratch of the calling thread: prepared x (decode), dequantized rows (prefill). Kept between calls: a decode step makes hundreds.
struct CallerScratch {
  AlignedBuffer<float> x;
  AlignedBuffer<uint8_t> rows;
};

CallerScratch& caller_scratch() {
  thread_local CallerScratch s;
  return s;
}

void gemm_quant_decode(const QuantKernels& kt, int64_t m, const float* x, int64_t ldx,
                       const GemmWeights& w, GemmEpilogue ep, float* y, int64_t ldy,
                       TaskRunner& runner) {
  const QuantFormat f = format_of(w);
  const bool i4 = f.dtype == DType::kI4;
  DecodeJob job{&kt, i4 ? &kt.i4 : &kt.f8, f, strides_of(f), &w, ep, m, x, ldx, y, ldy};
  if (i4 || kt.prep_f8 != nullptr) {
    CallerScratch& cs = caller_scratch();
    const int64_t xf = i4 ? kt.i4_x_floats(f.k, f.group) : kt.f8_x_floats(f.k);
    cs.x.reserve(m * xf);
    for (int64_t i = 0; i < m; ++i) {
      if (i4) {
        kt.prep_i4(x + i * ldx, f.k, f.group, cs.x.data() + i * xf);
      } else {
        kt.prep_f8(x + i * ldx, f.k, cs.x.data() + i * xf);
      }
    }
    job.x = cs.x.data();
    job.ldx = xf;
  }
  const int64_t n_out = ep == GemmEpilogue::kSiluMul ? w.rows[0] : w.n();
  const int64_t granule = ep == GemmEpilogue::kSiluMul ? job.t->rows / 2 : job.t->rows;
  const int64_t units = (n_out + granule - 1) / granule;
  const int64_t n_chunks = std::min<int64_t>(std::max(1, runner.concurrency()), units);
  auto task = [&](int64_t t) {
    const int64_t c0 = std::min(n_out, units * t / n_chunks * granule);
    const int64_t c1 = std::min(n_out, units * (t + 1) / n_chunks * granule);
    if (c0 < c1) run_decode_task(job, c0, c1);
  };
  if (n_chunks == 1) {
    task(0);
  } else {
    runner.run(n_chunks, task);
  }
}

void gemm_quant_prefill(const QuantKernels& kt, int64_t m, const float* x, int64_t ldx,
                        const GemmWeights& w, GemmEpilogue ep, float* y, int64_t ldy,
                        TaskRunner& runner) {
  const QuantFormat f = format_of(w);
  const RowStrides strides = strides_of(f);
  // Where cpu::gemm multiplies in bf16 (AMX; the vdpbf16ps panels with kBf16) it gets bf16
  // weights; every other path gets exact f32 ones.
  const bool bf16 = prefill_in_bf16() && kt.dequant_bf16 != nullptr;
  const int64_t elem = bf16 ? 2 : 4;
  const bool silu = ep == GemmEpilogue::kSiluMul;
  const int n_src = silu ? 2 : 1;  // blocks dequantized together
  // Multiples of 32 rows keep AMX units (2 x 16 rows) whole inside a chunk.
  const int64_t chunk_rows =
      std::max<int64_t>(32, kDequantBytes / (n_src * f.k * elem) / 32 * 32);
  CallerScratch& cs = caller_scratch();
  const int64_t threads = std::max(1, runner.concurrency());
  const int n_segments = silu ? 1 : w.n_blocks;
  int64_t base = 0;  // first output column of the segment
  for (int b = 0; b < n_segments; ++b) {
    const int64_t rows = w.rows[b];
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      cs.rows.reserve(n_src * nr * f.k * elem);
      uint8_t* buf = cs.rows.data();
      const int64_t total = n_src * nr;
      const int64_t n_tasks = std::min(threads, total);
      runner.run(n_tasks, [&](int64_t t) {
        for (int64_t i = total * t / n_tasks; i < total * (t + 1) / n_tasks; ++i) {
          const int src = silu ? static_cast<int>(i / nr) : b;
          const QuantRow row = row_of(w, f, strides, src, r0 + i % nr);
          uint8_t* dst = buf + i * f.k * elem;
          if (bf16) {
            kt.dequant_bf16(row, f, reinterpret_cast<uint16_t*>(dst));
          } else {
            kt.dequant_f32(row, f, reinterpret_cast<float*>(dst));
          }
        }
      });
      GemmWeights pw;
      pw.dtype = bf16 ? DType::kBF16 : DType::kF32;
      pw.k = f.k;
      pw.n_blocks = n_src;
      for (int j = 0; j < n_src; ++j) {
        const int src = silu ? j : b;
        pw.data[j] = buf + j * nr * f.k * elem;
        pw.rows[j] = nr;
        pw.bias[j] = w.bias[src] ? w.bias[src] + r0 : nullptr;
      }
      gemm(m, x, ldx, pw, ep, y + (silu ? r0 : base + r0), ldy, runner);
    }
    base += rows;
  }
}

// Whether an fp8 prefill would dequantize to f32 and run the f32 panels (no AMX, and no bf16
// panels for it: GemmPrecision is not kBf16), which pay a conversion of every weight per call.
bool f8_prefill_on_f32_panels() { return !has_amx() && !prefill_in_bf16(); }

}  // namespace

bool quant_on_amx_tiles(DType dtype, int64_t m) {
  return dtype == DType::kF8E4M3 && has_amx() && gemm_precision() != GemmPrecision::kF32 &&
         m >= kF8AmxMinM;
}

bool i4_on_amx_int8(int64_t m, int64_t group) {
  return has_amx() && m >= (group == 32 ? kI4AmxMinMGroup32 : kI4AmxMinM) &&
         (m < kQuantPrefillMinM ||
          (m == kQuantPrefillMinM && gemm_precision() != GemmPrecision::kF32));
}

bool decode_kernels_take(DType dtype, int64_t m) {
  if (dtype == DType::kF8E4M3 && m < kF8DecodeBelowM && f8_prefill_on_f32_panels() &&
      has_avx512_vnni()) {
    return true;
  }
  return m < kQuantPrefillMinM ||
         (m == kQuantPrefillMinM &&
          (dtype == DType::kF8E4M3 || gemm_precision() != GemmPrecision::kF32));
}

bool i4_on_int_prefill(int64_t m) {
  return (has_avx512_vnni() || !has_avx512()) && !has_amx() &&
         gemm_precision() != GemmPrecision::kF32 && !decode_kernels_take(DType::kI4, m);
}

bool vnni_x8() { return gemm_precision() == GemmPrecision::kBf16; }

bool i4_decode_x8(int64_t m, int64_t group) {
  return vnni_x8() && decode_kernels_take(DType::kI4, m) && !i4_on_amx_int8(m, group);
}

namespace {
std::atomic<int> g_f8_subnormal_split{static_cast<int>(F8SubnormalSplit::kAuto)};
}  // namespace

void set_f8_subnormal_split(F8SubnormalSplit p) {
  g_f8_subnormal_split.store(static_cast<int>(p), std::memory_order_relaxed);
}

bool f8_split_subnormals() {
  switch (static_cast<F8SubnormalSplit>(g_f8_subnormal_split.load(std::memory_order_relaxed))) {
    case F8SubnormalSplit::kOn: return true;
    case F8SubnormalSplit::kOff: return false;
    case F8SubnormalSplit::kAuto: break;
  }
  return cpu_features().denormal_assist;
}

bool i4_decode_on_vnni(int64_t m, int64_t group) {
  return decode_kernels_take(DType::kI4, m) && !i4_on_amx_int8(m, group) && has_avx512_vnni() &&
         (m >= 2 || !cpu_features().zmm_split);
}

bool f8_decode_on_dpbf16(int64_t m) {
  return decode_kernels_take(DType::kF8E4M3, m) && !quant_on_amx_tiles(DType::kF8E4M3, m) &&
         bf16_panels_preferred() && gemm_precision() != GemmPrecision::kF32;
}

bool quant_on_avx2_batch(DType dtype, int64_t m) {
  return !has_avx512_vnni() && m >= kAvx2BatchMinM && decode_kernels_take(dtype, m);
}

void gemm_quant(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
                float* y, int64_t ldy, TaskRunner& runner) {
  assert(w.dtype == DType::kF8E4M3 || w.dtype == DType::kI4);
  assert(w.dtype != DType::kI4 || ((w.group_size == 32 || w.group_size == 64 ||
                                    w.group_size == 128) &&
                                   w.k % w.group_size == 0));
  static_assert(kMaxQuantRows >= 4 && kMaxQuantM >= 8 && kMaxQuantM >= kAvx2BatchMaxM);
  static_assert(kAvx2BatchMaxM == kQuantPrefillMinM, "decode_kernels_take bounds the batched m");
  if (w.dtype == DType::kI4 && i4_on_amx_int8(m, w.group_size)) {
    gemm_quant_i4_amx(m, x, ldx, w, ep, y, ldy, runner);
  } else if (quant_on_amx_tiles(w.dtype, m)) {
    gemm_quant_f8_amx(m, x, ldx, w, ep, y, ldy, runner);
  } else if (w.dtype == DType::kI4 && i4_on_int_prefill(m)) {
    if (has_avx512_vnni()) {
      gemm_quant_i4_vnni_prefill(m, x, ldx, w, ep, y, ldy, runner);
    } else {
      gemm_quant_i4_avx2_prefill(m, x, ldx, w, ep, y, ldy, runner);
    }
  } else if (quant_on_avx2_batch(w.dtype, m)) {
    const bool x8 = w.dtype == DType::kI4 && vnni_x8();
    gemm_quant_decode(x8 ? quant_kernels_avx2_batch_x8() : quant_kernels_avx2_batch(), m, x, ldx,
                      w, ep, y, ldy, runner);
  } else if (!decode_kernels_take(w.dtype, m)) {
    const QuantKernels& kt = has_avx512() ? quant_kernels_avx512() : quant_kernels_avx2();
    gemm_quant_prefill(kt, m, x, ldx, w, ep, y, ldy, runner);
  } else {
    // From AVX512-VNNI on: the VNNI kernels (int4 dot products in vpdpwssd, 4 weight rows of
    // separate streams read 64 bytes at a time; up to 8 rows of x per call), batched decode
    // 1.3-2.2x the AVX2 kernels per step at m = 4..8 (Zen 4). At m = 1, measured on Emerald
    // Rapids (bench_gemm_quant gemv, weights streamed, both through gemm_decode_walk.h's
    // streams, alternating calls): the AVX2 kernels ran 0.80-0.97x these. Zen 4 (zmm_split)
    // keeps the AVX2 kernels at m = 1: there the VNNI kernels of an earlier session, one row at a
    // time, streamed int4 at 0.69-0.76x and fp8 at 0.85-0.88x the AVX2 ones end to end, and
    // these were not measured there. The AVX2 kernels also serve the plain AVX-512 level: there
    // they ran int4 g128 at 1.3-2x and fp8 at 1.1-1.6x the AVX-512 f32-dequantizing kernels.
    // fp8 on AMD from AVX512-BF16 on (f8_decode_on_dpbf16): the weights become bf16 by shifts
    // and vdpbf16ps multiplies them, half the multiply-pipe work of the VNNI kernel.
    const bool vnni = has_avx512_vnni() && (m >= 2 || !cpu_features().zmm_split);
    const bool x8 = w.dtype == DType::kI4 && vnni_x8();
    const QuantKernels& kt =
        !vnni && x8 ? quant_kernels_avx2_x8()
        : !vnni     ? quant_kernels_avx2()
        : x8        ? quant_kernels_avx512_vnni_x8()
        : w.dtype == DType::kF8E4M3 && f8_decode_on_dpbf16(m)
            ? quant_kernels_f8_dpbf16(gemm_precision() != GemmPrecision::kBf16)
            : quant_kernels_avx512_vnni();
    gemm_quant_decode(kt, m, x, ldx, w, ep, y, ldy, runner);
  }
}

}  // namespace sampan::cpu::gemm_detail
