#pragma once

#include <cuda_runtime.h>

#include <string>

namespace sampan::cuda {

// Number of visible CUDA devices; 0 when there is no driver or GPU (never an error).
int device_count();

// Whether CUDA can run here, and if not why. kNoGpu: no NVIDIA driver, or a driver with no
// visible GPU: the one reason a GPU test may report Skipped. kBroken: a driver is installed but
// CUDA fails (a driver older than the toolkit, a device error): GPU tests must fail, not skip.
enum class GpuPresence { kReady, kNoGpu, kBroken };
GpuPresence probe_gpu(std::string* why);
// out: [n] device memory, set to value on `stream`. Returns the cudaError_t of the launch.
int fill(float* out, float value, int n, cudaStream_t stream);

}  // namespace sampan::cuda
