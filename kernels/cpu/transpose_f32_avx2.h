// f32 matrix transposes in 8 x 8 register blocks (AVX2, the CPU baseline), for the kernels that
// reorder operands before a GEMM (causal attention, the LoRA weight gradients). An element loop
// writes one strided line per element; a register block writes eight 32-byte rows at once.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace sampan::cpu {

// 8 x 8 block: d[c * ldd + r] = s[r * lds + c].
inline void transpose8x8_f32(const float* s, int64_t lds, float* d, int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    for (int j = 0; j < 2; ++j) {
      r[i + j] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], 0x44);
      r[i + j + 2] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], 0xee);
    }
  }
  // r[0..3]: columns (0, 4), (2, 6), (1, 5), (3, 7) of rows 0-3 in the 128-bit halves; r[4..7]
  // the same of rows 4-7.
  static constexpr int kCol[4] = {0, 2, 1, 3};
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + kCol[i] * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(d + (kCol[i] + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: whole 8 x 8 blocks in registers,
// the edges element by element.
inline void transpose_f32(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst,
                          int64_t ldd) {
  const int64_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  for (int64_t r = 0; r < r8; r += 8) {
    for (int64_t c = 0; c < c8; c += 8) transpose8x8_f32(src + r * lds + c, lds, dst + c * ldd + r, ldd);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = r < r8 ? c8 : 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}

}  // namespace sampan::cpu
