#include "quant/gguf_repack.h"

#include <bit>
#include <cstring>

namespace sampan::quant {
namespace {

static_assert(std::endian::native == std::endian::little, "the lanes below are little-endian");

// Eight code bytes c (two's complement nibbles already, n ^ 8) as 4 little-endian 16-bit lanes
// v = c[2t] | c[2t + 1] << 8 -> 4 output bytes: the low nibbles of c[2t], c[2t + 1] (kHigh =
// false) or their high nibbles (true), packed low then high.
template <bool kHigh>
inline uint32_t pack_pairs(uint64_t v) {
  if (kHigh) v >>= 4;
  uint64_t b = (v & 0x000f000f000f000full) | ((v >> 4) & 0x00f000f000f000f0ull);
  b = (b | (b >> 8)) & 0x0000ffff0000ffffull;  // lanes' low bytes side by side
  b = (b | (b >> 16)) & 0x00000000ffffffffull;
  return static_cast<uint32_t>(b);
}

}  // namespace

// Element e of a Q4_0 block: nibble n = (e < 16 ? qs[e] : qs[e - 16] >> 4) & 15, q = n - 8,
// whose two's complement nibble is n ^ 8. So output byte j < 8 pairs the low nibbles of
// qs[2j], qs[2j + 1] and byte 8 + j their high nibbles: 64-bit lane arithmetic per 8 bytes
// (4.1x the byte-by-byte form on a Zen 5 core: 1.6 -> 6.5 GB/s of Q4_0 in cache).
void q4_0_to_int4(const uint8_t* src, int64_t rows, int64_t k, uint8_t* data, uint16_t* scales) {
  const int64_t nb = k / 32;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + (r * nb + b) * 18;
      std::memcpy(scales + r * nb + b, blk, 2);
      uint64_t lo, hi;  // qs[0..7], qs[8..15]
      std::memcpy(&lo, blk + 2, 8);
      std::memcpy(&hi, blk + 10, 8);
      lo ^= 0x8888888888888888ull;
      hi ^= 0x8888888888888888ull;
      const uint32_t out[4] = {pack_pairs<false>(lo), pack_pairs<false>(hi), pack_pairs<true>(lo),
                               pack_pairs<true>(hi)};
      std::memcpy(data + r * (k / 2) + b * 16, out, 16);
    }
  }
}

}  // namespace sampan::quant
