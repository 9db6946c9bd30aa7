// Device side of bench_cuda_decode: the fill kernels 
// (bench_cuda_decode.h says what each promises).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "bench/bench_cuda_decode.h"

namespace sampan::bench {
namespace {

constexpr int kThreads = 256;

// Grid-stride launches: enough blocks to fill any current GPU, never more than the data needs.
unsigned blocks_for(size_t n) {
  const size_t need = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(need, 1), 8192));
}

// splitmix64: a full-period, well-mixed hash of the index, so any element can be made alone.
__device__ uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) from the top 24 bits of the hash.
__device__ float uniform_pm1(uint64_t seed, size_t i) {
  const uint32_t top = static_cast<uint32_t>(mix(seed ^ (i * 0xd1b54a32d192ed03ull)) >> 40);
  return static_cast<float>(top) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_bf16_uniform_kernel(__nv_bfloat16* dst, size_t n, float amplitude,
                                         uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16(amplitude * uniform_pm1(seed, i));
  }
}

__global__ void fill_fp8_kernel(__nv_fp8_storage_t* dst, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // Saturating conversion: never the NaN code.
    dst[i] = __nv_cvt_float_to_fp8(448.0f * uniform_pm1(seed, i), __NV_SATFINITE, __NV_E4M3);
  }
}

__global__ void fill_bytes_kernel(uint8_t* dst, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<uint8_t>(mix(seed ^ (i * 0xd1b54a32d192ed03ull)) >> 56);
  }
}

__global__ void fill_f32_kernel(float* dst, size_t n, float value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

__global__ void fill_f16_kernel(__half* dst, size_t n, float value) {
  const __half h = __float2half(value);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = h;
  }
}

__global__ void fill_f16_strided_kernel(uint8_t* dst, size_t count, size_t stride, size_t offset,
                                        float value) {
  const __half h = __float2half(value);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    *reinterpret_cast<__half*>(dst + i * stride + offset) = h;
  }
}

}  // namespace

cudaError_t fill_bf16_uniform(void* dst, size_t n, float amplitude, uint64_t seed,
                              cudaStream_t stream) {
  fill_bf16_uniform_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<__nv_bfloat16*>(dst), n, amplitude, seed);
  return cudaGetLastError();
}

cudaError_t fill_fp8_e4m3_uniform(void* dst, size_t n, uint64_t seed, cudaStream_t stream) {
  fill_fp8_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<__nv_fp8_storage_t*>(dst),
                                                           n, seed);
  return cudaGetLastError();
}

cudaError_t fill_random_bytes(void* dst, size_t n, uint64_t seed, cudaStream_t stream) {
  fill_bytes_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint8_t*>(dst), n, seed);
  return cudaGetLastError();
}

cudaError_t fill_f32(void* dst, size_t n, float value, cudaStream_t stream) {
  fill_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<float*>(dst), n, value);
  return cudaGetLastError();
}

cudaError_t fill_f16(void* dst, size_t n, float value, cudaStream_t stream) {
  fill_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<__half*>(dst), n, value);
  return cudaGetLastError();
}

cudaError_t fill_f16_strided(void* dst, size_t count, size_t stride, size_t offset, float value,
                             cudaStream_t stream) {
  fill_f16_strided_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<uint8_t*>(dst),
                                                                      count, stride, offset, value);
  return cudaGetLastError();
}

}  // namespace sampan::bench
