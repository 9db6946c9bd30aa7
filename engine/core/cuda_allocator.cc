// CUDA device memory. Without SAMPAN_WITH_CUDA every entry point answers "not compiled with
// CUDA" so callers build and fail cleanly at run time instead of at link time.
#include <mutex>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/error.h"

#ifdef SAMPAN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/device_query.cuh"
#endif

namespace sampan {

#ifdef SAMPAN_WITH_CUDA

namespace {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    cudaSetDevice(index_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so the process stays usable
      fail(ErrorCode::kOutOfMemory, "cuda:{}: cannot allocate {} bytes: {}", index_, bytes,
           cudaGetErrorString(err));
    }
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    if (ptr) cudaFree(ptr);
  }
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

}  // namespace

bool cuda_compiled() { return true; }

int cuda_device_count() { return cuda::device_count(); }

Allocator& cuda_allocator(int index) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mu);
  const int n = cuda_device_count();
  SAMPAN_CHECK(index >= 0 && index < n, ErrorCode::kNotFound,
               "cuda:{} does not exist ({} CUDA device(s) visible)", index, n);
  if (allocators.empty()) allocators.resize(n);
  if (!allocators[index]) allocators[index] = std::make_unique<CudaAllocator>(index);
  return *allocators[index];
}

#else

bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }

Allocator& cuda_allocator(int index) {
  fail(ErrorCode::kUnsupported, "cuda:{} requested but Sampan was built without CUDA", index);
}

#endif

}  // namespace sampan
