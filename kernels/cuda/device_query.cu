// The first CUDA translation unit: device discovery used by the engine to decide whether GPU
// tests run or skip. More kernels arrive with the CUDA backend issue.
#include <cuda_runtime.h>
#include <unistd.h>

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

GpuPresence probe_gpu(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (rc == cudaSuccess && n > 0) return GpuPresence::kReady;
  // The kernel driver publishes these whenever it is loaded; without them there is no GPU for
  // CUDA to fail on, whatever the runtime's error code says.
  const bool driver = access("/proc/driver/nvidia/version", F_OK) == 0 ||
                      access("/dev/nvidiactl", F_OK) == 0;
  if (!driver) {
    *why = "no NVIDIA driver on this machine";
    return GpuPresence::kNoGpu;
  }
  if (rc == cudaSuccess || rc == cudaErrorNoDevice) {
    *why = "the NVIDIA driver sees no GPU (or CUDA_VISIBLE_DEVICES hides them)";
    return GpuPresence::kNoGpu;
  }
  *why = std::string("an NVIDIA driver is installed but CUDA fails: ") + cudaGetErrorName(rc) +
         ": " + cudaGetErrorString(rc);
  return GpuPresence::kBroken;
}

int fill(float* out, float value, int n, cudaStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  fill_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(out, value, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
