// CUDA smoke test: allocate through the engine's CUDA allocator, run the first compiled CUDA
// kernel, copy back and check. Exits 77 (CTest: "Skipped", visibly) when the build has CUDA but
// the machine has no GPU or driver.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "kernels/cuda/device_query.cuh"

int main() {
  using namespace sampan;
  std::string why;
  switch (cuda::probe_gpu(&why)) {
    case cuda::GpuPresence::kReady: break;
    case cuda::GpuPresence::kNoGpu:
      std::printf("SKIPPED: %s\n", why.c_str());
      return 77;
    case cuda::GpuPresence::kBroken:
      std::printf("FAILED: %s\n", why.c_str());
      return 1;
  }
  try {
    const int n = 1000;
    Tensor t = Tensor::empty({n}, DType::kF32, Device::cuda(0));
    if (cuda::fill(t.data<float>(), 3.5f, n, nullptr) != 0) {
      std::printf("FAILED: kernel launch\n");
      return 1;
    }
    std::vector<float> host(n);
    if (cudaMemcpy(host.data(), t.raw(), n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::printf("FAILED: copy back\n");
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      if (host[i] != 3.5f) {
        std::printf("FAILED: element %d is %g\n", i, host[i]);
        return 1;
      }
    }
    // An absurd allocation fails with a message naming the size, and the process stays usable.
    try {
      Tensor huge = Tensor::empty({int64_t{1} << 50}, DType::kF32, Device::cuda(0));
      std::printf("FAILED: 4 PiB allocation succeeded\n");
      return 1;
    } catch (const Error& e) {
      std::printf("expected error: %s\n", e.what());
    }
    Tensor again = Tensor::empty({n}, DType::kF32, Device::cuda(0));
    std::printf("1 passed, 0 failed\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}
