// Device-side decoding of quantized weights, shared by the GEMV kernels and the dequantizing
// kernels so both follow kernels/cpu/gemm_cpu.h bit for bit. Include from .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace sampan::cuda {

// OCP E4M3 byte -> f32 / 256, exactly. Placing the 7 exponent+mantissa bits 7 places up gives an
// f16 with the same mantissa and an exponent 8 lower (biases 15 vs 7), subnormals included, and
// f16 -> f32 is exact; callers fold the 2^8 into the row scale. 0x7f / 0xff are NaN.
__device__ __forceinline__ float fp8_e4m3_to_f32_div256(uint32_t b) {
  const uint32_t h = ((b & 0x80u) << 8) | ((b & 0x7fu) << 7);
  const float f = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  return (b & 0x7fu) == 0x7fu ? __int_as_float(0x7fc00000) : f;
}

// 2^23 + u for a 4-bit u, built from bits: an exact int -> float without the conversion unit.
constexpr float kMagic = 8388608.0f;
__device__ __forceinline__ float magic_nibble(uint32_t u4) { return __int_as_float(0x4b000000u | u4); }

// Signed nibble e (0..7) of a 32-bit word of packed INT4 (low nibble first), as q - zero:
// `offset_word` is the word XOR 0x88888888 (q + 8 in each nibble) and `offset` is
// kMagic + 8 + zero, so the subtraction is exact (all values are integers below 2^24).
__device__ __forceinline__ float int4_minus_zero(uint32_t offset_word, int e, float offset) {
  return magic_nibble((offset_word >> (4 * e)) & 0xfu) - offset;
}

__device__ __forceinline__ float load_scale(const __half* s, int64_t i) { return __half2float(s[i]); }
__device__ __forceinline__ float load_scale(const __nv_bfloat16* s, int64_t i) {
  return __bfloat162float(s[i]);
}

}  // namespace sampan::cuda
