// Block-diagonal fast Walsh-Hadamard transform on the GPU, the contract of
// kernels/cpu/hadamard_cpu.h: each consecutive block of `block` floats of a row becomes
// H_block b / sqrt(block) (Sylvester order), with the same butterflies as the CPU kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// The largest block the kernel supports on the current device (its tile must fit in the
// shared memory one thread block may opt in to: 32768 on an A100 or H100). < 0 on a CUDA error.
int64_t hadamard_max_block();

// x: [rows, n] row stride ldx; y: [rows, n] row stride ldy; y may equal x (with ldy == ldx).
// block: a power of two dividing n (1 copies). Device pointers; queued on `stream`. Returns the
// cudaError_t of the launch (cudaErrorInvalidValue when block is not a power of two dividing n
// or exceeds hadamard_max_block()).
int hadamard(int64_t rows, int64_t n, int64_t block, const float* x, int64_t ldx, float* y,
             int64_t ldy, cudaStream_t stream);

}  // namespace sampan::cuda
