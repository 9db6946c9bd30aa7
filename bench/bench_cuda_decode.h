// Device-side helpers of bench_cuda_decode (bench_cuda_decode.cu): random weights written on the
// GPU in their final format, so an 8B-parameter model needs no host arrays and no files. Raw
// pointers and a stream in, a cudaError_t out (the launch status; faults show at the next synchronisation).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace sampan::bench {

// dst: [n] bf16, uniform in [-amplitude, amplitude] from a hash of (seed, index).
cudaError_t fill_bf16_uniform(void* dst, size_t n, float amplitude, uint64_t seed,
                              cudaStream_t stream);

// dst: [n] FP8 E4M3 codes of values uniform in [-448, 448] (the full range, as absmax-scaled
// weights use it); the caller's per-row scale sets the real magnitude.
cudaError_t fill_fp8_e4m3_uniform(void* dst, size_t n, uint64_t seed, cudaStream_t stream);

// dst: [n] bytes, uniform: as packed INT4 every nibble is a uniform code in [-8, 7].
cudaError_t fill_random_bytes(void* dst, size_t n, uint64_t seed, cudaStream_t stream);

// dst: [n] f32 or f16 (raw bits of `value` converted on the device), all equal.
cudaError_t fill_f32(void* dst, size_t n, float value, cudaStream_t stream);
cudaError_t fill_f16(void* dst, size_t n, float value, cudaStream_t stream);

// For i < count: the f16 at dst + i * stride + offset (bytes; both even) set to `value`: the
// scale fields of GGUF blocks whose other bytes are random.
cudaError_t fill_f16_strided(void* dst, size_t count, size_t stride, size_t offset, float value,
                             cudaStream_t stream);

}  // namespace sampan::bench
