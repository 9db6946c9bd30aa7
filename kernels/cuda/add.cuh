// Element-wise f32 addition on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// a, b, y: [rows, cols] with row strides lda, ldb, ldy (a contiguous tensor of any shape is one
// row of numel columns). y may alias a or b with the same stride. Device pointers; queued on
// `stream`. Returns the cudaError_t of the launch.
int add(int64_t rows, int64_t cols, const float* a, int64_t lda, const float* b, int64_t ldb,
        float* y, int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
