// Block-field unpacking shared by the AVX2 and AVX-512 GGUF decoders (SSE2 instructions only,
// internal linkage: safe to include from translation units of either instruction set).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace sampan::cpu::gemm_detail {
namespace {

// The 16 6-bit sub-block scales of a Q3_K block b, minus 32, as int8: scale j has its low 4 bits
// in byte 96 + j (j < 8) or the high nibble of 96 + j - 8, its top 2 bits in byte 104 + j % 4 at
// bit 2 (j / 4).
inline __m128i q3_k_scales(const uint8_t* b) {
  uint64_t l;
  uint32_t u;
  std::memcpy(&l, b + 96, 8);
  std::memcpy(&u, b + 104, 4);
  const __m128i lo = _mm_set_epi64x(static_cast<int64_t>((l >> 4) & 0x0f0f0f0f0f0f0f0full),
                                    static_cast<int64_t>(l & 0x0f0f0f0f0f0f0f0full));
  const __m128i hi = _mm_setr_epi32(
      static_cast<int>(u & 0x03030303u), static_cast<int>((u >> 2) & 0x03030303u),
      static_cast<int>((u >> 4) & 0x03030303u), static_cast<int>((u >> 6) & 0x03030303u));
  return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

}  // namespace
}  // namespace sampan::cpu::gemm_detail
