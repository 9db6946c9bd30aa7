// Embedding: one thread block per token copies (and widens) one table row. The 16-bit formats
// widen exactly (bf16 is the top half of an f32; every f16 is an f32), so the output is the
// same bits as the CPU's.
#include <cuda_fp16.h>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kEmbeddingMaxThreads = 256;

struct F32Row {
  using Raw = float;
  using Raw4 = float4;  // 16 bytes
  __device__ static float widen(float v) { return v; }
};
struct F16Row {
  using Raw = unsigned short;
  using Raw4 = ushort4;  // 8 bytes
  __device__ static float widen(unsigned short v) { return __half2float(__ushort_as_half(v)); }
};
struct BF16Row {
  using Raw = unsigned short;
  using Raw4 = ushort4;
  __device__ static float widen(unsigned short v) {
    return __uint_as_float(static_cast<unsigned>(v) << 16);
  }
};

// kVec: four elements per load and a float4 store (dim % 4 == 0 and alignment checked).
template <class Row, bool kVec>
__global__ void __launch_bounds__(kEmbeddingMaxThreads) embedding_kernel(int64_t n_tokens,
                                 const int32_t* __restrict__ ids,         // [n_tokens]
                                 const typename Row::Raw* __restrict__ table,  // [vocab, dim]
                                 int64_t vocab, int64_t dim,
                                 float* __restrict__ y, int64_t ldy) {    // [n_tokens, dim]
  const int64_t units = kVec ? dim / 4 : dim;
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const int64_t id = ids[t];
    float* yt = y + t * ldy;
    if (id < 0 || id >= vocab) {
      for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yt[i] = __int_as_float(0x7fc00000);
      continue;
    }
    const typename Row::Raw* row = table + id * dim;
    for (int64_t i = threadIdx.x; i < units; i += blockDim.x) {
      if constexpr (kVec) {
        const typename Row::Raw4 v = reinterpret_cast<const typename Row::Raw4*>(row)[i];
        reinterpret_cast<float4*>(yt)[i] =
            make_float4(Row::widen(v.x), Row::widen(v.y), Row::widen(v.z), Row::widen(v.w));
      } else {
        yt[i] = Row::widen(row[i]);
      }
    }
  }
}

template <class Row>
int launch(int64_t n_tokens, const int32_t* ids, const void* table, int64_t vocab, int64_t dim,
           float* y, int64_t ldy, cudaStream_t stream) {
  const auto* t = static_cast<const typename Row::Raw*>(table);
  // Row starts are id * dim elements in: dim % 4 keeps every row as aligned as the table.
  const bool vec = dim % 4 == 0 && ldy % 4 == 0 && aligned16(y) &&
                   reinterpret_cast<uintptr_t>(table) % sizeof(typename Row::Raw4) == 0;
  // Pure copying: 256 threads keep enough loads in flight per row of any common width.
  const int threads = row_block_threads(vec ? dim / 4 : dim, kEmbeddingMaxThreads);
  if (vec) {
    embedding_kernel<Row, true><<<row_grid(n_tokens), threads, 0, stream>>>(n_tokens, ids, t,
                                                                            vocab, dim, y, ldy);
  } else {
    embedding_kernel<Row, false><<<row_grid(n_tokens), threads, 0, stream>>>(n_tokens, ids, t,
                                                                             vocab, dim, y, ldy);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int embedding(int64_t n_tokens, const int32_t* ids, const void* table, DType table_type,
              int64_t vocab, int64_t dim, float* y, int64_t ldy, cudaStream_t stream) {
  if (n_tokens <= 0 || dim <= 0) return cudaSuccess;
  switch (table_type) {
    case DType::kF32: return launch<F32Row>(n_tokens, ids, table, vocab, dim, y, ldy, stream);
    case DType::kF16: return launch<F16Row>(n_tokens, ids, table, vocab, dim, y, ldy, stream);
    case DType::kBF16: return launch<BF16Row>(n_tokens, ids, table, vocab, dim, y, ldy, stream);
    case DType::kF8E4M3:
    case DType::kI8:
    case DType::kI4:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kBool: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

}  // namespace sampan::cuda
