#include "quant/gguf_repack.h"

#include <cstring>

namespace sampan::quant {

void q4_0_to_int4(const uint8_t* src, int64_t rows, int64_t k, uint8_t* data, uint16_t* scales) {
  const int64_t nb = k / 32;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + (r * nb + b) * 18;
      std::memcpy(scales + r * nb + b, blk, 2);
      // Element e: nibble n = (e < 16 ? qs[e] : qs[e - 16] >> 4) & 15, q = n - 8, whose
      // two's complement nibble is n ^ 8.
      uint8_t* out = data + r * (k / 2) + b * 16;
      const uint8_t* qs = blk + 2;
      for (int j = 0; j < 16; ++j) {
        const int e0 = 2 * j, e1 = 2 * j + 1;
        const int n0 = (e0 < 16 ? qs[e0] : qs[e0 - 16] >> 4) & 15;
        const int n1 = (e1 < 16 ? qs[e1] : qs[e1 - 16] >> 4) & 15;
        out[j] = static_cast<uint8_t>((n0 ^ 8) | ((n1 ^ 8) << 4));
      }
    }
  }
}

}  // namespace sampan::quant
