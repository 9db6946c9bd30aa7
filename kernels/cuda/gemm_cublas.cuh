// cuBLASLt matrix products for the CUDA linear op, and the per-device state they share: one
// cuBLASLt handle, one stream-ordered scratch pool and one heuristic-algorithm cache per device,
// created lazily and safe to use from several threads and streams at once.
//
// Layout. The engine is row-major: y[m, n] = x[m, k] · w[n, k]ᵀ. cuBLASLt is column-major, so
// the same memory is Dᵀ: D[n, m] = op_T(A = w, [k, n] col-major, ld ldw) · (B = x, [k, m]
// col-major, ld ldx). That is the "TN" form, the one cuBLASLt's FP8 kernels require.
//
// Precision (every product has f32 output, f32 compute and f32 alpha/beta):
//  - kF32 operands: CUBLAS_COMPUTE_32F, never TF32. The CPU backend is f32 and so is this path:
//    error is f32 summation error (~sqrt(k) 2^-24 of sum |x||w| in practice).
//  - kBF16 / kF16 operands: both A and B have the weight type (cuBLASLt has no bf16 x f32 kernel),
//    so the caller converts x with convert_rows first (round to nearest even). That rounding is
//    the dominant error: at most 2^-8 (bf16) or 2^-11 (f16) of sum |x||w|; products and sums are
//    f32. f16 overflows to inf past |x| = 65504 (f16 models keep their activations in range).
//  - kF8E4M3 operands (sm_89+): the caller quantizes x (kernels/cuda/fp8_gemm.cuh) and applies
//    the scales afterwards; cuBLASLt gets no scale pointers (a scale pointer that is not 16-byte
//    aligned makes its heuristic answer NOT_SUPPORTED, measured on an H200 with CUDA 13).
//    Accumulation is f32 (no fast accum).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"

namespace sampan::cuda {

// The outcome of work that may fail in the CUDA runtime or in cuBLAS: at most one is non-zero.
struct GemmStatus {
  int cuda = 0;    // cudaError_t
  int cublas = 0;  // cublasStatus_t
  bool ok() const { return cuda == 0 && cublas == 0; }
};
inline GemmStatus cuda_status(int err) { return {err, 0}; }
// cuBLAS status name ("CUBLAS_STATUS_NOT_SUPPORTED"), for messages.
const char* cublas_status_name(int status);

// Compute capability of the current device (major * 10 + minor, e.g. 90); 0 on error.
int current_sm();

// Device memory for the duration of one call, taken from a per-device pool that keeps freed
// blocks for reuse (release threshold: never), so steady-state calls do not reach the driver.
// Allocation and release are ordered on `stream`: the memory may be used by work queued on that
// stream after allocate() and is released (for reuse by later work) when the destructor's
// cudaFreeAsync is reached. Work on other streams must not touch it.
class GemmScratch {
 public:
  GemmScratch() = default;
  ~GemmScratch();
  GemmScratch(const GemmScratch&) = delete;
  GemmScratch& operator=(const GemmScratch&) = delete;

  // bytes == 0 allocates nothing (data() stays null). Returns the cudaError_t. At most once.
  int allocate(size_t bytes, cudaStream_t stream);
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// One column-major product as described above. Device pointers; queued on `stream`.
struct LtGemm {
  int64_t m = 0;  // rows of x and y (tokens)
  int64_t n = 0;  // rows of w, columns of y written
  int64_t k = 0;
  DType type = DType::kF32;        // of x and w: kF32, kBF16, kF16 or kF8E4M3
  const void* x = nullptr;         // [m, k] row stride ldx
  int64_t ldx = 0;
  const void* w = nullptr;         // [n, k] row stride ldw
  int64_t ldw = 0;
  const float* bias = nullptr;     // [n] f32 or null; added by the cuBLASLt epilogue
  float* y = nullptr;              // [m, n] f32 row stride ldy
  int64_t ldy = 0;
};

// Runs the product. When cuBLASLt has no algorithm for these types, sizes and alignments on this
// device, returns its heuristic's status as `cublas` (usually CUBLAS_STATUS_NOT_SUPPORTED) and
// queues nothing; the answer is cached per shape, so asking again is cheap. Sizes >= 1; bias
// must be null for kF8E4M3 (it is ignored: FP8 callers add it after the weight scale).
GemmStatus lt_gemm(const LtGemm& g, cudaStream_t stream);

// y[r, c] = type(x[r, c]) for r < rows, c < cols: f32 -> kBF16 or kF16, round to nearest even.
// x: [rows, cols] f32 row stride ldx; y: [rows, cols] of `type`, row stride ldy.
int convert_rows(int64_t rows, int64_t cols, const float* x, int64_t ldx, DType type, void* y,
                 int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
