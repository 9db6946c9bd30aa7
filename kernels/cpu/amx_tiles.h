// AMX tile configuration shared by the AMX kernels (gemm_amx.cc, conv_bf16_amx.cc, ...), and the
// bf16 helpers of the x packers (gemm_amx.cc, gemm_wt_amx.cc): include only from files compiled
// with -mamx-tile and -mavx512bf16 (every *_amx.cc). Every kernel uses one palette: 8 tiles of
// 16 rows x 64 bytes (16 x 32 bf16, or 16 x 16 f32 accumulators).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace sampan::cpu::amx {

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// ldtilecfg for the palette above, on the calling thread. Pair with _tile_release() when done.
inline void configure_tiles() {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12 does not model __builtin_ia32_ldtilecfg as reading the whole 64-byte block: out of
  // line it dropped the colsb/rows stores above as dead (only palette_id was written, and the
  // first tile instruction then raised SIGILL). The barrier makes every store visible.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// The four f32 accumulator tiles tmm0..3 of the 2 x 2 blockings (gemm_amx.cc, gemm_wt_amx.cc):
// zeroed, or loaded from / stored to c [4, 16, 16] f32 (tile t at c + 256 t).
inline void zero_c4() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

inline void load_c4(const float* c) {
  _tile_loadd(0, c, 64);
  _tile_loadd(1, c + 256, 64);
  _tile_loadd(2, c + 512, 64);
  _tile_loadd(3, c + 768, 64);
}

inline void store_c4(float* c) {
  _tile_stored(0, c, 64);
  _tile_stored(1, c + 256, 64);
  _tile_stored(2, c + 512, 64);
  _tile_stored(3, c + 768, 64);
}

// bf16 -> f32 is exact: the bf16 bits are the top half of the f32.
inline __m512 bf16_to_f32(__m256bh h) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<const __m256i&>(h)), 16));
}

// The part of v that bf16(v) misses, exactly (both lie on v's f32 grid and |v - bf16(v)| is at
// most half a bf16 ulp of v). Zero where bf16(v) is infinite, so an infinite or overflowing x
// gives the same result as the one-pass path instead of inf - inf = NaN.
inline __m512 bf16_residual(__m512 v, __m256bh h) {
  const __m512 back = bf16_to_f32(h);
  const __mmask16 inf = _mm512_fpclass_ps_mask(back, 0x18);  // +inf, -inf
  return _mm512_maskz_sub_ps(static_cast<__mmask16>(~inf), v, back);
}

inline __m512i concat_bf16(__m256bh lo, __m256bh hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(reinterpret_cast<const __m256i&>(lo)),
                            reinterpret_cast<const __m256i&>(hi), 1);
}

// Rows [rows, 16) of each of `steps` 16 x 32 bf16 tiles of a weight panel zeroed (a short last
// group of a block), for the AmxPanelSource packers. out: [steps, 16, 32] bf16, 64-byte aligned.
inline void zero_panel_rows(int64_t rows, int64_t steps, uint16_t* out) {
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t r = rows; r < 16; ++r) {
      _mm512_store_si512(out + s * 512 + r * 32, _mm512_setzero_si512());
    }
  }
}

}  // namespace sampan::cpu::amx
