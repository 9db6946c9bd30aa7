#include "kernels/cpu/kv_quant.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace sampan::cpu {

uint16_t kv_f32_to_bf16(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

uint8_t kv_f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = static_cast<uint8_t>((std::bit_cast<uint32_t>(f) >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0x1p-6f) {
    // Subnormal range, steps of 2^-9; a result of 8 is the smallest normal, code 0x08.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  uint32_t b = std::bit_cast<uint32_t>(a);
  b += 0x7ffffu + ((b >> 20) & 1u);  // round the 23-bit mantissa to 3 bits, ties to even
  // 448 is the largest value below 464, the midpoint to the next (NaN) code, so no overflow.
  return sign | static_cast<uint8_t>((b >> 20) - (120u << 3));
}

uint16_t kv_f32_to_f16_sat(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = static_cast<uint16_t>((std::bit_cast<uint32_t>(f) >> 16) & 0x8000u);
  float a = std::fabs(f);
  if (a > 65504.0f) a = 65504.0f;
  if (a < 0x1p-14f) {
    return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f));  // 1024: smallest normal
  }
  uint32_t b = std::bit_cast<uint32_t>(a);
  b += 0xfffu + ((b >> 13) & 1u);
  return sign | static_cast<uint16_t>((b >> 13) - (112u << 10));
}

namespace {

float absmax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  return m;
}

// Rounds x to an integer in [lo, hi]; NaN gives 0.
int clamp_round(float x, float lo, float hi) {
  if (!(x >= lo)) return x < lo ? static_cast<int>(lo) : 0;
  if (x > hi) return static_cast<int>(hi);
  return static_cast<int>(std::nearbyint(x));
}

void quantize_head(KvDtype dtype, const float* x, int64_t hd, uint8_t* dst) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, x, static_cast<size_t>(hd) * 4);
      return;
    case KvDtype::kBF16:
      for (int64_t i = 0; i < hd; ++i) {
        const uint16_t h = kv_f32_to_bf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kF8E4M3:
    case KvDtype::kI8: {
      const bool fp8 = dtype == KvDtype::kF8E4M3;
      float scale = absmax(x, hd) / (fp8 ? 448.0f : 127.0f);
      if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 0.0f;
      for (int64_t i = 0; i < hd; ++i) {
        const float v = scale > 0.0f ? x[i] / scale : 0.0f;
        dst[i] = fp8 ? kv_f32_to_e4m3(v)
                     : static_cast<uint8_t>(static_cast<int8_t>(clamp_round(v, -127.0f, 127.0f)));
      }
      std::memcpy(dst + hd, &scale, 4);
      return;
    }
    case KvDtype::kI4: {
      const int64_t gs = kv_i4_group(hd);
      uint8_t* params = dst + (hd + 1) / 2;
      std::memset(dst, 0, static_cast<size_t>((hd + 1) / 2));
      for (int64_t g0 = 0; g0 < hd; g0 += gs) {
        float lo = x[g0], hi = x[g0];
        for (int64_t i = g0 + 1; i < g0 + gs; ++i) {
          lo = x[i] < lo ? x[i] : lo;
          hi = x[i] > hi ? x[i] : hi;
        }
        const uint16_t s16 = kv_f32_to_f16_sat((hi - lo) / 15.0f), m16 = kv_f32_to_f16_sat(lo);
        std::memcpy(params + g0 / gs * 4, &s16, 2);
        std::memcpy(params + g0 / gs * 4 + 2, &m16, 2);
        // Quantize against the stored values, so the rounding error is what the reader sees.
        const float s = kv_f16_to_f32(s16), m = kv_f16_to_f32(m16);
        for (int64_t i = g0; i < g0 + gs; ++i) {
          const int u = s > 0.0f ? clamp_round((x[i] - m) / s, 0.0f, 15.0f) : 0;
          dst[i / 2] |= static_cast<uint8_t>(u << (4 * (i & 1)));
        }
      }
      return;
    }
  }
}

void dequantize_head(KvDtype dtype, const uint8_t* src, int64_t hd, float* x) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(x, src, static_cast<size_t>(hd) * 4);
      return;
    case KvDtype::kBF16:
      for (int64_t i = 0; i < hd; ++i) x[i] = kv_bf16_to_f32(kv_load_u16(src + 2 * i));
      return;
    case KvDtype::kF8E4M3: {
      const float scale = kv_load_f32(src + hd);
      for (int64_t i = 0; i < hd; ++i) x[i] = kv_e4m3_to_f32(src[i]) * scale;
      return;
    }
    case KvDtype::kI8: {
      const float scale = kv_load_f32(src + hd);
      for (int64_t i = 0; i < hd; ++i) x[i] = static_cast<float>(static_cast<int8_t>(src[i])) * scale;
      return;
    }
    case KvDtype::kI4: {
      const int64_t gs = kv_i4_group(hd);
      const uint8_t* params = src + (hd + 1) / 2;
      for (int64_t i = 0; i < hd; ++i) {
        const float s = kv_f16_to_f32(kv_load_u16(params + i / gs * 4));
        const float m = kv_f16_to_f32(kv_load_u16(params + i / gs * 4 + 2));
        const int u = (src[i / 2] >> (4 * (i & 1))) & 0xf;
        // One rounding, as the vector reader's fused multiply-add.
        x[i] = std::fma(static_cast<float>(u), s, m);
      }
      return;
    }
  }
}

}  // namespace

void kv_quantize_row(KvDtype dtype, const float* x, int64_t n_kv_heads, int64_t head_dim,
                     uint8_t* dst) {
  const int64_t hb = kv_head_bytes(dtype, head_dim);
  for (int64_t h = 0; h < n_kv_heads; ++h) quantize_head(dtype, x + h * head_dim, head_dim, dst + h * hb);
}

void kv_dequantize_row(KvDtype dtype, const uint8_t* src, int64_t n_kv_heads, int64_t head_dim,
                       float* x) {
  const int64_t hb = kv_head_bytes(dtype, head_dim);
  for (int64_t h = 0; h < n_kv_heads; ++h) dequantize_head(dtype, src + h * hb, head_dim, x + h * head_dim);
}

}  // namespace sampan::cpu
