// Driver of cpu::gemm for GGUF block-type weights (dtype kU8); kernels in gemm_ggml_avx512.cc and
// gemm_ggml_avx2.cc, contract in gemm_ggml.h.
//
// Decode (m < kGgmlPrefillMinM): the output columns are split into one contiguous range per
// worker, which walk_decode_columns (gemm_decode_walk.h) reads as R interleaved streams: each
// kernel call takes R weight rows, one per stream (kSiluMul: R/2 gate rows and the same R/2 up
// rows), and runs every m-group of x against them while they sit in L1, so the blocks stream
// from memory once. Nothing is dequantized to
// memory. For the x16 kernels (gemm_ggml.h says which types) the calling thread first rounds x
// to 16 bits per 256 elements into thread-local scratch (gemm_ggml.h), read by every worker; for
// the x8 kernels (kBf16 on AVX512-VNNI: ggml_decode_table) to int8 the same way.
//
// Prefill (m >= kGgmlPrefillMinM): on AMX CPUs (prefill_in_bf16 and has_amx) gemm_ggml_amx
// (gemm_ggml_amx.cc) dequantizes the blocks straight into the tile panels. Elsewhere output rows
// are taken in chunks of dequantized weights; all workers dequantize a chunk, then the plain
// gemm() runs on it with the chunk's biases and epilogue, writing its columns of y. Where gemm()
// multiplies in bf16 (the vdpbf16ps panels with kBf16) the chunk is bf16 (each row dequantized to
// f32 in L1, then rounded), up to kDequantBytesBf16, as the kI4 prefill does; otherwise exact
// f32, up to kDequantBytes. Once the weights are rounded to bf16 (2^-9), kSplitBf16's second
// product for x's low half (x kept to 2^-16) buys no accuracy that matters, so these calls run
// with x rounded to bf16 (kBf16) as well: 1.4x the prefill speed (Q4_K_M, TinyLlama shape, 2
// threads, Sapphire Rapids: 401 -> 553 tok/s, then through bf16 chunks on the tiles too).
#include <algorithm>
#include <cassert>
#include <optional>
#include <vector>

#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/gemm_decode_walk.h"
#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu::gemm_detail {
namespace {

// Dequantized f32 weights per prefill chunk: small enough to stay in L2 while the panel kernels
// pack them. Measured (Zen 4, 1 thread, Q4_K 2048 x 2048 in cache, thread CPU time, GFLOP/s at
// m = 32 / 128 / 512): 16 MB 43 / 81 / 88, 2 MB 67 / 88 / 83, 512 KB 74 / 89 / 83, 256 KB 44 /
// 46 / 45 (32-row chunks: per-call overhead).
constexpr int64_t kDequantBytes = 2 << 20;
// bf16 chunks for the vdpbf16ps panels (kBf16 without AMX): as gemm_quant_cpu.cc, a chunk
// holds a whole TinyLlama weight (k = 2048: 4096 rows).
constexpr int64_t kDequantBytesBf16 = 16 << 20;

struct DecodeJob {
  const GgmlKernels* kt;
  GgmlDotTable t;
  const GemmWeights* w;
  int64_t row_bytes;
  GemmEpilogue ep;
  int64_t m;
  const float* x;  // [m, ldx]: raw f32, or prepared (t.x16)
  int64_t ldx;
  float* y;  // [m, ldy]
  int64_t ldy;
};

const uint8_t* row_ptr(const DecodeJob& job, int b, int64_t r) {
  return static_cast<const uint8_t*>(job.w->data[b]) + r * job.row_bytes;
}

// Output columns [c0, c1).
void run_decode_task(const DecodeJob& job, int64_t c0, int64_t c1) {
  const GgmlDotTable& t = job.t;
  const DecodeWalk walk{job.w, job.ep, job.kt->epilogue, t.rows, t.max_m, job.m, job.y, job.ldy};
  const GgmlDotFn dot = t.resolve != nullptr ? t.resolve() : t.dot;
  walk_decode_columns<const uint8_t*, kGgmlMaxRows, kGgmlMaxM>(
      walk, c0, c1, [&](int b, int64_t r) { return row_ptr(job, b, r); },
      [&](const uint8_t* const* rows, int64_t i0, int mb, float* out) {
        dot(rows, job.w->k, job.x + i0 * job.ldx, job.ldx, mb, out);
      });
}

// Prepared x of the calling thread (x16 kernels); kept between calls: a decode step makes
// hundreds.
AlignedBuffer<float>& x16_scratch() {
  thread_local AlignedBuffer<float> s;
  return s;
}

void gemm_ggml_decode(const GgmlKernels& kt, int64_t m, const float* x, int64_t ldx,
                      const GemmWeights& w, GemmEpilogue ep, float* y, int64_t ldy,
                      TaskRunner& runner) {
  DecodeJob job{&kt, ggml_decode_table(kt, w.ggml_type, m), &w,
                ggml_row_bytes(w.ggml_type, w.k), ep, m, x, ldx, y, ldy};
  if (job.t.x16) {  // x rounded to 16 bits once per call, by the calling thread
    AlignedBuffer<float>& buf = x16_scratch();
    const int64_t xf = job.t.x16_floats(w.k);
    buf.reserve(m * xf);
    for (int64_t i = 0; i < m; ++i) job.t.prep_x16(x + i * ldx, w.k, buf.data() + i * xf);
    job.x = buf.data();
    job.ldx = xf;
  }
  const int64_t n_out = ep == GemmEpilogue::kSiluMul ? w.rows[0] : w.n();
  const int64_t granule = ep == GemmEpilogue::kSiluMul ? job.t.rows / 2 : job.t.rows;
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

// Dequantized rows of the calling thread's prefill chunks (f32 or bf16); kept between calls.
AlignedBuffer<uint8_t>& prefill_scratch() {
  thread_local AlignedBuffer<uint8_t> s;
  return s;
}

// One f32 row of each worker, rounded to bf16 after dequantization.
AlignedBuffer<float>& row_scratch() {
  thread_local AlignedBuffer<float> s;
  return s;
}

void gemm_ggml_prefill(const GgmlKernels& kt, int64_t m, const float* x, int64_t ldx,
                       const GemmWeights& w, GemmEpilogue ep, float* y, int64_t ldy,
                       TaskRunner& runner) {
  const GgmlDequantFn dequant = kt.dequant[static_cast<int>(w.ggml_type)];
  const bool bf16 = prefill_in_bf16();
  if (bf16 && has_amx()) {
    std::optional<ScopedGemmPrecision> x_in_bf16;
    if (gemm_precision() == GemmPrecision::kSplitBf16) x_in_bf16.emplace(GemmPrecision::kBf16);
    gemm_ggml_amx(m, x, ldx, w, dequant, ep, y, ldy, runner);
    return;
  }
  const int64_t k = w.k, row_bytes = ggml_row_bytes(w.ggml_type, k);
  const int64_t elem = bf16 ? 2 : 4;
  const bool silu = ep == GemmEpilogue::kSiluMul;
  const int n_src = silu ? 2 : 1;  // blocks dequantized together
  // Multiples of 32 rows keep AMX units (2 x 16 rows) whole inside a chunk.
  const int64_t chunk_rows = std::max<int64_t>(
      32, (bf16 ? kDequantBytesBf16 : kDequantBytes) / (n_src * k * elem) / 32 * 32);
  AlignedBuffer<uint8_t>& scratch = prefill_scratch();
  const int64_t threads = std::max(1, runner.concurrency());
  const int n_segments = silu ? 1 : w.n_blocks;
  int64_t base = 0;  // first output column of the segment
  for (int b = 0; b < n_segments; ++b) {
    const int64_t rows = w.rows[b];
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      scratch.reserve(n_src * nr * k * elem);
      uint8_t* buf = scratch.data();
      const int64_t total = n_src * nr;
      const int64_t n_tasks = std::min(threads, total);
      auto task = [&](int64_t t) {
        float* tmp = nullptr;
        if (bf16) {
          AlignedBuffer<float>& rs = row_scratch();
          rs.reserve(k);
          tmp = rs.data();
        }
        for (int64_t i = total * t / n_tasks; i < total * (t + 1) / n_tasks; ++i) {
          const int src = silu ? static_cast<int>(i / nr) : b;
          const uint8_t* row = static_cast<const uint8_t*>(w.data[src]) + (r0 + i % nr) * row_bytes;
          uint8_t* dst = buf + i * k * elem;
          if (bf16) {
            dequant(row, k, tmp);
            convert_f32_to_bf16(tmp, reinterpret_cast<uint16_t*>(dst), k);
          } else {
            dequant(row, k, reinterpret_cast<float*>(dst));
          }
        }
      };
      if (n_tasks == 1) {
        task(0);
      } else {
        runner.run(n_tasks, task);
      }
      GemmWeights pw;
      pw.dtype = bf16 ? DType::kBF16 : DType::kF32;
      pw.k = k;
      pw.n_blocks = n_src;
      for (int j = 0; j < n_src; ++j) {
        const int src = silu ? j : b;
        pw.data[j] = buf + j * nr * k * elem;
        pw.rows[j] = nr;
        pw.bias[j] = w.bias[src] ? w.bias[src] + r0 : nullptr;
      }
      std::optional<ScopedGemmPrecision> x_in_bf16;
      if (bf16 && gemm_precision() == GemmPrecision::kSplitBf16) {
        x_in_bf16.emplace(GemmPrecision::kBf16);
      }
      gemm(m, x, ldx, pw, ep, y + (silu ? r0 : base + r0), ldy, runner);
    }
    base += rows;
  }
}

}  // namespace

const GgmlDotTable& ggml_decode_table(const GgmlKernels& kt, GgmlType type, int64_t m) {
  const int slot = static_cast<int>(type);
  // kt's dot_x8: AVX512-VNNI kernels in the AVX-512 table, AVX2 ones in the AVX2 table.
  if (kt.dot_x8[slot].dot && vnni_x8() && (has_avx512_vnni() || !has_avx512())) {
    return kt.dot_x8[slot];
  }
  if (kt.dot_vnni_batch[slot].dot && has_avx512_vnni() && m >= 2) return kt.dot_vnni_batch[slot];
  if (kt.dot_vnni[slot].dot && has_avx512_vnni()) return kt.dot_vnni[slot];
  if (kt.dot_batch[slot].dot && m >= kGgmlBatchM) return kt.dot_batch[slot];
  return kt.dot[slot];
}

bool ggml_i16_prefill_type(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_K ||
         type == GgmlType::kQ5_K || type == GgmlType::kQ6_K || type == GgmlType::kQ4_1 ||
         type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 || type == GgmlType::kIQ4_NL ||
         type == GgmlType::kIQ4_XS || type == GgmlType::kQ2_K || type == GgmlType::kQ3_K;
}

bool ggml_on_int_prefill(GgmlType type, int64_t m) {
  if (!ggml_i16_prefill_type(type) || m < kGgmlPrefillMinM || has_amx() ||
      gemm_precision() == GemmPrecision::kF32) {
    return false;
  }
  return !has_avx512() || has_avx512_vnni();
}

bool ggml_prefill_x8(GgmlType type) {
  // Unsigned codes above 129 (Q8_0's q + 128, the IQ4 codebooks' kv + 128) would saturate
  // vpmaddubsw's int16 pair sums: without VNNI those types keep x16.
  const bool wide_codes =
      type == GgmlType::kQ8_0 || type == GgmlType::kIQ4_NL || type == GgmlType::kIQ4_XS;
  return vnni_x8() && (has_avx512_vnni() || has_vex_vnni() || !wide_codes);
}

void gemm_ggml(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
               float* y, int64_t ldy, TaskRunner& runner) {
  assert(w.dtype == DType::kU8 && ggml_block_type_supported(w.ggml_type));
  assert(ggml_row_bytes(w.ggml_type, w.k) > 0);
  assert(w.n_blocks >= 1 && w.n_blocks <= kMaxGemmBlocks && ldx >= w.k);
  assert(ep == GemmEpilogue::kStore || (w.n_blocks == 2 && w.rows[0] == w.rows[1]));
  // Kernels never throw: a caller that skipped the checks gets y untouched, not a crash.
  if (!ggml_block_type_supported(w.ggml_type) || ggml_row_bytes(w.ggml_type, w.k) <= 0) return;
  const GgmlKernels& kt = has_avx512() ? ggml_kernels_avx512() : ggml_kernels_avx2();
  if (ggml_on_int_prefill(w.ggml_type, m)) {
    if (has_avx512_vnni()) {
      gemm_ggml_vnni_prefill(m, x, ldx, w, ep, y, ldy, runner);
    } else {
      gemm_ggml_avx2_prefill(m, x, ldx, w, ep, y, ldy, runner);
    }
  } else if (m >= kGgmlPrefillMinM) {
    gemm_ggml_prefill(kt, m, x, ldx, w, ep, y, ldy, runner);
  } else {
    gemm_ggml_decode(kt, m, x, ldx, w, ep, y, ldy, runner);
  }
}

}  // namespace sampan::cpu::gemm_detail
