// AMX tile configuration shared by the AMX kernels (gemm_amx.cc, conv_bf16_amx.cc): include only
// from files compiled with -mamx-tile. Every kernel uses one palette: 8 tiles of 16 rows x 64
// bytes (16 x 32 bf16, or 16 x 16 f32 accumulators).
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

}  // namespace sampan::cpu::amx
