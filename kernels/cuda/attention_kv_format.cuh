// Device-side scalar conversions of the KV-cache formats (device code: included by .cu files
// only). Each is a line-for-line port of its kernels/cpu/kv_quant.cc / kv_quant.h counterpart,
// so that the GPU writes the CPU's bytes and reads the CPU's values: rintf is the CPU's
// std::nearbyint in the default rounding mode (to nearest even).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// kv_f32_to_bf16: round to nearest even; NaN stays NaN.
__device__ __forceinline__ uint16_t kv_f32_to_bf16(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

// kv_f32_to_e4m3: round to nearest even, saturating to +-448; NaN -> 0x7f.
__device__ __forceinline__ uint8_t kv_f32_to_e4m3(float f) {
  if (isnan(f)) return 0x7f;
  const uint8_t sign = static_cast<uint8_t>((__float_as_uint(f) >> 24) & 0x80u);
  const float a = fabsf(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(rintf(a * 512.0f));
  uint32_t b = __float_as_uint(a);
  b += 0x7ffffu + ((b >> 20) & 1u);
  return sign | static_cast<uint8_t>((b >> 20) - (120u << 3));
}

// kv_f32_to_f16_sat: round to nearest even, saturating to +-65504; NaN -> 0x7e00.
__device__ __forceinline__ uint16_t kv_f32_to_f16_sat(float f) {
  if (isnan(f)) return 0x7e00;
  const uint16_t sign = static_cast<uint16_t>((__float_as_uint(f) >> 16) & 0x8000u);
  float a = fabsf(f);
  if (a > 65504.0f) a = 65504.0f;
  if (a < 0x1p-14f) return sign | static_cast<uint16_t>(rintf(a * 0x1p24f));
  uint32_t b = __float_as_uint(a);
  b += 0xfffu + ((b >> 13) & 1u);
  return sign | static_cast<uint16_t>((b >> 13) - (112u << 10));
}

__device__ __forceinline__ float kv_bf16_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

// Exact: subnormals (exponent 0) are m * 2^-9.
__device__ __forceinline__ float kv_e4m3_to_f32(uint32_t b) {
  const uint32_t m = b & 0x7fu;
  const float f = m < 8 ? static_cast<float>(m) * 0x1p-9f : __uint_as_float((m << 20) + (120u << 23));
  return (b & 0x80u) ? -f : f;
}

__device__ __forceinline__ float kv_f16_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = static_cast<float>(m) * 0x1p-24f;
  } else if (e == 31) {
    f = __uint_as_float(0x7f800000u | (m << 13));
  } else {
    f = __uint_as_float(((e + 112u) << 23) | (m << 13));
  }
  return __uint_as_float(__float_as_uint(f) | sign);
}

// The unaligned little-endian fields of a head record (scales, i4 group parameters).
__device__ __forceinline__ uint32_t kv_load_u16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
}
__device__ __forceinline__ float kv_load_f32(const uint8_t* p) {
  return __uint_as_float(kv_load_u16(p) | kv_load_u16(p + 2) << 16);
}
__device__ __forceinline__ void kv_store_u16(uint8_t* p, uint32_t h) {
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}
__device__ __forceinline__ void kv_store_f32(uint8_t* p, float f) {
  const uint32_t u = __float_as_uint(f);
  kv_store_u16(p, u & 0xffffu);
  kv_store_u16(p + 2, u >> 16);
}

}  // namespace sampan::cuda
