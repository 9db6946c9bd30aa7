// The first CUDA translation unit: device discovery used by the engine to decide whether GPU
// tests run or skip. More kernels arrive with the CUDA backend issue.
#include <cuda_runtime.h>

#include "kernels/cuda/device_query.cuh"

namespace sampan::cuda {

__global__ void fill_kernel(float* __restrict__ out, float value, int n) {  // out: [n]
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int fill(float* out, float value, int n, cudaStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  fill_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(out, value, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
