// Embedding lookup from a table of GGUF blocks (contract: embedding.cuh, embedding_ggml). One
// thread block per token; each thread decodes 32-element units of the row with the exact
// decoders of gemm_ggml_decode.cuh, so the output has the bits of cpu::dequantize_ggml_row.
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm_ggml.cuh"
#include "kernels/cuda/gemm_ggml_decode.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kUnit = 32;

template <GgmlType T>
__global__ void __launch_bounds__(kMaxThreads) embedding_ggml_kernel(
    int64_t n_tokens, const int32_t* __restrict__ ids, const uint8_t* __restrict__ table,
    int64_t vocab, int64_t dim, int64_t row_bytes, float* __restrict__ y, int64_t ldy) {
  constexpr int kUnitsPerBlock = static_cast<int>(ggml_block_size(T)) / kUnit;
  constexpr int64_t kBlockBytes = ggml_type_size(T);
  const int64_t units = dim / kUnit;
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const int64_t id = ids[t];
    float* yt = y + t * ldy;
    if (id < 0 || id >= vocab) {
      for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yt[i] = __int_as_float(0x7fc00000);
      continue;
    }
    const uint8_t* row = table + id * row_bytes;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      float w[kUnit];
      ggml::decode32<T>(row + (u / kUnitsPerBlock) * kBlockBytes,
                        static_cast<int>(u % kUnitsPerBlock), w);
      float* o = yt + u * kUnit;
#pragma unroll
      for (int l = 0; l < kUnit; ++l) o[l] = w[l];
    }
  }
}

template <GgmlType T>
int launch(int64_t n_tokens, const int32_t* ids, const uint8_t* table, int64_t vocab, int64_t dim,
           float* y, int64_t ldy, cudaStream_t stream) {
  const int threads = row_block_threads(dim / kUnit, kMaxThreads);
  embedding_ggml_kernel<T><<<row_grid(n_tokens), threads, 0, stream>>>(
      n_tokens, ids, table, vocab, dim, ggml_row_bytes(T, dim), y, ldy);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int embedding_ggml(int64_t n_tokens, const int32_t* ids, const void* table, GgmlType type,
                   int64_t vocab, int64_t dim, float* y, int64_t ldy, cudaStream_t stream) {
  if (n_tokens <= 0 || dim <= 0) return cudaSuccess;
  if (!ggml_cuda_supported(type) || dim % ggml_block_size(type) != 0 ||
      reinterpret_cast<uintptr_t>(table) % 2 != 0 || ldy < dim) {
    return cudaErrorInvalidValue;
  }
  const auto* t = static_cast<const uint8_t*>(table);
  switch (type) {
    SAMPAN_GGML_TYPE_CASES(launch, n_tokens, ids, t, vocab, dim, y, ldy, stream)
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
