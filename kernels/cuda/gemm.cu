// The CUDA linear op's dispatcher: picks a path per weight format and m (table in gemm.cuh),
// handles fused blocks, bias and the silu_mul epilogue, and owns the scratch of each call.
#include <cublasLt.h>

#include <atomic>

#include "kernels/common/quant_scheme.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm_dequant.cuh"
#include "kernels/cuda/gemm_ggml.cuh"
#include "kernels/cuda/gemm_gemv_quant.cuh"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace sampan::cuda {
namespace {

// Bytes of scratch one chunk may take: bf16 weight rows being multiplied (dequant path) or the
// [rows, 2F] f32 product before silu_mul. Big enough that each chunk is a full-speed GEMM.
constexpr int64_t kChunkBytes = int64_t{32} << 20;
// cuBLASLt's 16-byte rule for tensor-core operands, in elements of 2 bytes and of 1 byte.
constexpr int64_t kLd16 = 8;
constexpr int64_t kLd8 = 16;

constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// x in `type` (kBF16 / kF16) in fresh scratch with a 16-byte aligned row stride.
GemmStatus converted_x(int64_t m, const float* x, int64_t ldx, int64_t k, DType type,
                       GemmScratch& scratch, int64_t* ld, cudaStream_t stream) {
  *ld = round_up(k, kLd16);
  if (const int e = scratch.allocate(static_cast<size_t>(m * *ld * 2), stream)) return cuda_status(e);
  return cuda_status(convert_rows(m, k, x, ldx, type, scratch.data(), *ld, stream));
}

// f32 / bf16 / f16 weights: every block is one cuBLASLt product into its columns of y.
GemmStatus plain_gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
                      int64_t ldy, cudaStream_t stream) {
  GemmScratch xs;
  const void* xa = x;
  int64_t lda = ldx;
  if (w.dtype != DType::kF32) {
    if (const GemmStatus s = converted_x(m, x, ldx, w.k, w.dtype, xs, &lda, stream); !s.ok()) return s;
    xa = xs.data();
  }
  int64_t col = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    LtGemm g;
    g.m = m;
    g.n = w.rows[b];
    g.k = w.k;
    g.type = w.dtype;
    g.x = xa;
    g.ldx = lda;
    g.w = w.data[b];
    g.ldw = w.k;
    g.bias = w.bias[b];
    g.y = y + col;
    g.ldy = ldy;
    if (const GemmStatus s = lt_gemm(g, stream); !s.ok()) return s;
    col += w.rows[b];
  }
  return {};
}

// Quantized weights at large m without FP8 tensor cores: rows dequantized to bf16 a chunk at a
// time, x rounded to bf16 once, one cuBLASLt bf16 product per chunk.
GemmStatus dequant_gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
                        int64_t ldy, cudaStream_t stream) {
  GemmScratch xs;
  int64_t ldxb = 0;
  if (const GemmStatus s = converted_x(m, x, ldx, w.k, DType::kBF16, xs, &ldxb, stream); !s.ok()) {
    return s;
  }
  const int64_t ldw = round_up(w.k, kLd16);
  int64_t max_rows = 0;
  for (int b = 0; b < w.n_blocks; ++b) max_rows = max64(max_rows, w.rows[b]);
  int64_t chunk = max64(kChunkBytes / (ldw * 2), 1);
  if (chunk >= 128) chunk = chunk / 128 * 128;  // whole tiles of the GEMM's n dimension
  chunk = min64(chunk, max_rows);
  GemmScratch wb;
  if (const int e = wb.allocate(static_cast<size_t>(chunk * ldw * 2), stream)) return cuda_status(e);
  int64_t col = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    for (int64_t r0 = 0; r0 < w.rows[b]; r0 += chunk) {
      const int64_t rows = min64(chunk, w.rows[b] - r0);
      // Queued after the previous chunk's product on the same stream, so reusing wb is safe.
      const int e = w.dtype == DType::kU8
                        ? ggml_dequant_rows_bf16(w, b, r0, rows, wb.data(), ldw, stream)
                        : dequant_rows_bf16(w, b, r0, rows, wb.data(), ldw, stream);
      if (e) return cuda_status(e);
      LtGemm g;
      g.m = m;
      g.n = rows;
      g.k = w.k;
      g.type = DType::kBF16;
      g.x = xs.data();
      g.ldx = ldxb;
      g.w = wb.data();
      g.ldw = ldw;
      g.bias = w.bias[b] ? w.bias[b] + r0 : nullptr;
      g.y = y + col + r0;
      g.ldy = ldy;
      if (const GemmStatus s = lt_gemm(g, stream); !s.ok()) return s;
    }
    col += w.rows[b];
  }
  return {};
}

// FP8 kernels need 16-byte aligned operands and leading dimensions: the cases that certainly
// fail, ruled out before spending the quantization of x on them.
bool fp8_tensor_possible(const GemmWeights& w, const float* y, int64_t ldy) {
  bool possible = w.k % kLd8 == 0 && ldy % 4 == 0;
  int64_t col = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    possible = possible && aligned16(w.data[b]) && aligned16(y + col);
    col += w.rows[b];
  }
  return possible;
}

std::atomic<int64_t> fp8_refusals{0};

// FP8 x FP8 on tensor cores (sm_89+), x quantized per row (fp8_gemm.cuh). A cuBLAS status (no
// algorithm for these sizes and alignments, or any other cuBLASLt refusal) means nothing the
// caller relies on was written: it then falls back to the bf16 path, which computes every block
// again.
GemmStatus fp8_tensor_gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
                           int64_t ldy, cudaStream_t stream) {
  const int64_t ld8 = round_up(w.k, kLd8);
  const int64_t scale_bytes = round_up(m * 4, 256);  // keeps x8 256-byte aligned
  GemmScratch s;
  if (const int e = s.allocate(static_cast<size_t>(scale_bytes + m * ld8), stream)) return cuda_status(e);
  auto* row_scale = static_cast<float*>(s.data());
  auto* x8 = static_cast<uint8_t*>(s.data()) + scale_bytes;
  if (const int e = fp8_quantize_x(m, w.k, x, ldx, x8, ld8, row_scale, stream)) return cuda_status(e);
  int64_t col = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    LtGemm g;
    g.m = m;
    g.n = w.rows[b];
    g.k = w.k;
    g.type = DType::kF8E4M3;
    g.x = x8;
    g.ldx = ld8;
    g.w = w.data[b];
    g.ldw = w.k;
    g.y = y + col;
    g.ldy = ldy;
    if (const GemmStatus st = lt_gemm(g, stream); !st.ok()) return st;
    if (const int e = fp8_scale_bias(m, w.rows[b], y + col, ldy, row_scale,
                                     static_cast<const float*>(w.scales[b]), w.bias[b], stream)) {
      return cuda_status(e);
    }
    col += w.rows[b];
  }
  return {};
}

GemmStatus gemm_store(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, float* y,
                      int64_t ldy, cudaStream_t stream) {
  switch (w.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      return plain_gemm(m, x, ldx, w, y, ldy, stream);
    case DType::kF8E4M3:
      if (m <= kFp8GemvMaxM) return cuda_status(quant_gemv(m, x, ldx, w, y, ldy, stream));
      if (current_sm() >= 89 && fp8_tensor_possible(w, y, ldy)) {
        const GemmStatus s = fp8_tensor_gemm(m, x, ldx, w, y, ldy, stream);
        if (s.cublas == 0) return s;  // done, or a CUDA error
        fp8_refusals.fetch_add(1, std::memory_order_relaxed);
      }
      // Without the tensor path the GEMV still beats dequantizing every weight to bf16.
      if (m <= kGemvMaxM) return cuda_status(quant_gemv(m, x, ldx, w, y, ldy, stream));
      return dequant_gemm(m, x, ldx, w, y, ldy, stream);
    case DType::kI4:
      if (m <= kGemvMaxM) return cuda_status(quant_gemv(m, x, ldx, w, y, ldy, stream));
      if (m <= kI4GemvSlicesMaxM) {
        // The GEMV again per kGemvMaxM rows: each slice reads the weights once more, which up
        // to here costs less than expanding them to bf16 (gemm.cuh).
        for (int64_t r = 0; r < m; r += kGemvMaxM) {
          const int e = quant_gemv(min64(kGemvMaxM, m - r), x + r * ldx, ldx, w, y + r * ldy, ldy, stream);
          if (e) return cuda_status(e);
        }
        return {};
      }
      return dequant_gemm(m, x, ldx, w, y, ldy, stream);
    case DType::kU8:  // GGUF blocks (gemm_ggml.cuh)
      if (m <= kGemvMaxM) return cuda_status(ggml_gemv(m, x, ldx, w, y, ldy, stream));
      return dequant_gemm(m, x, ldx, w, y, ldy, stream);
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
    case DType::kBool:
      break;
  }
  return cuda_status(cudaErrorInvalidValue);
}

bool valid(const GemmWeights& w) {
  if (w.n_blocks < 1 || w.n_blocks > kMaxGemmBlocks || w.k < 1) return false;
  const bool quantized = w.dtype == DType::kF8E4M3 || w.dtype == DType::kI4;
  for (int b = 0; b < w.n_blocks; ++b) {
    if (!w.data[b] || w.rows[b] < 1 || (quantized && !w.scales[b])) return false;
  }
  if (w.dtype == DType::kU8) {
    return ggml_cuda_supported(w.ggml_type) && w.k % ggml_block_size(w.ggml_type) == 0;
  }
  return w.dtype != DType::kI4 || (int4_group_size_ok(w.group_size) && w.k % w.group_size == 0);
}

}  // namespace

int64_t fp8_tensor_refusals() { return fp8_refusals.load(std::memory_order_relaxed); }

GemmStatus gemm(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue epilogue,
                float* y, int64_t ldy, cudaStream_t stream) {
  if (m <= 0) return {};
  if (!valid(w) || ldx < w.k) return cuda_status(cudaErrorInvalidValue);
  if (epilogue == GemmEpilogue::kStore) {
    if (ldy < w.n()) return cuda_status(cudaErrorInvalidValue);
    return gemm_store(m, x, ldx, w, y, ldy, stream);
  }
  // kSiluMul: [rows, 2F] products a chunk of rows at a time, then y = silu(gate) * up.
  const int64_t f = w.rows[0];
  if (w.n_blocks != 2 || w.rows[1] != f || ldy < f) return cuda_status(cudaErrorInvalidValue);
  const int64_t chunk = min64(max64(kChunkBytes / (2 * f * 4), 1), m);
  GemmScratch t;
  if (const int e = t.allocate(static_cast<size_t>(chunk * 2 * f * 4), stream)) return cuda_status(e);
  auto* tmp = static_cast<float*>(t.data());
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = min64(chunk, m - r0);
    if (const GemmStatus s = gemm_store(rows, x + r0 * ldx, ldx, w, tmp, 2 * f, stream); !s.ok()) {
      return s;
    }
    if (const int e = silu_mul(rows, f, tmp, 2 * f, tmp + f, 2 * f, y + r0 * ldy, ldy, stream)) {
      return cuda_status(e);
    }
  }
  return {};
}

}  // namespace sampan::cuda
