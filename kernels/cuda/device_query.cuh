#pragma once

#include <cuda_runtime.h>

namespace sampan::cuda {

// Number of visible CUDA devices; 0 when there is no driver or GPU (never an error).
int device_count();
// out: [n] device memory, set to value on `stream`. Returns the cudaError_t of the launch.
int fill(float* out, float value, int n, cudaStream_t stream);

}  // namespace sampan::cuda
