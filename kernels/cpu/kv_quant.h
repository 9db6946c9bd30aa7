// The byte layout of the quantized KV-cache formats (KvDtype in attention_cpu.h) and the scalar
// conversions behind them. kv_cache_write quantizes rows with kv_quantize_row; attention reads
// the same layout with vector loads (kv_quant_impl.h), and tests read it back with
// kv_dequantize_row.
//
// A token row is n_kv_heads head records back to back, each kv_head_bytes(dtype, head_dim) long,
// so kv_row_bytes = n_kv_heads * kv_head_bytes and a head's record can be reached without
// knowing the others. One head record:
//  - kF32:    head_dim f32.
//  - kBF16:   head_dim bf16 (uint16, little endian).
//  - kF8E4M3: head_dim E4M3 bytes, then the f32 scale (unaligned).
//  - kI8:     head_dim int8, then the f32 scale (unaligned).
//  - kI4:     (head_dim + 1) / 2 bytes of nibbles (element 2j low, 2j+1 high), then per group
//             of kv_i4_group(head_dim) values an f16 scale and an f16 minimum (unaligned).
// Quantization rules (the header's formats, with the details it leaves open):
//  - every rounding is to nearest even;
//  - kF8E4M3 / kI8: scale = absmax / 448 (/ 127) in f32; values round(x / scale), saturated to
//    +-448 (+-127); a head of zeros gets scale 0 and zero values, never NaN;
//  - kI4: scale = f16((max - min) / 15) (subtraction and division in f32), minimum = f16(min),
//    both saturated to the finite f16 range; u = round((x - minimum) / scale) with the stored
//    (f16) scale and minimum, clamped to [0, 15]; a constant group (scale 0) stores u = 0, so it
//    reads back as the minimum.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_cpu.h"

namespace sampan::cpu {

using sampan::kv_head_bytes;  // kernels/common/kv_format.h

// Writes one token row: x [n_kv_heads * head_dim] -> dst [kv_row_bytes(...)] bytes.
void kv_quantize_row(KvDtype dtype, const float* x, int64_t n_kv_heads, int64_t head_dim,
                     uint8_t* dst);
// Reads one token row back: src [kv_row_bytes(...)] bytes -> x [n_kv_heads * head_dim].
void kv_dequantize_row(KvDtype dtype, const uint8_t* src, int64_t n_kv_heads, int64_t head_dim,
                       float* x);

// Round to nearest even; NaN stays NaN.
uint16_t kv_f32_to_bf16(float f);
// Round to nearest even, saturating to +-448 (no infinities in E4M3 "fn"); NaN -> 0x7f.
uint8_t kv_f32_to_e4m3(float f);
// Round to nearest even, saturating to +-65504 (a scale or minimum must stay finite).
uint16_t kv_f32_to_f16_sat(float f);

inline float kv_bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Exact: E4M3 values are f32 values; subnormals (exponent 0) are m * 2^-9.
inline float kv_e4m3_to_f32(uint8_t b) {
  const uint32_t m = b & 0x7fu;
  float f = m < 8 ? static_cast<float>(m) * 0x1p-9f
                  : std::bit_cast<float>((m << 20) + (120u << 23));
  return (b & 0x80u) ? -f : f;
}

inline float kv_f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = static_cast<float>(m) * 0x1p-24f;
  } else if (e == 31) {
    f = std::bit_cast<float>(0x7f800000u | (m << 13));
  } else {
    f = std::bit_cast<float>(((e + 112u) << 23) | (m << 13));
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | sign);
}

// The unaligned f32 / f16 fields of a head record.
inline float kv_load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline uint16_t kv_load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

}  // namespace sampan::cpu
