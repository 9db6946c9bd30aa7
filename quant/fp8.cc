#include "quant/fp8.h"

#include <cmath>

namespace sampan::quant {

float fp8_e4m3_to_f32(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  return sign * std::ldexp(1.0f + man / 8.0f, exp - 7);
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Scale into units of the smallest subnormal (2^-9) inside the binade of `a`, round there.
  int e;
  std::frexp(a, &e);        // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 7;      // biased exponent of a
  if (exp < 1) exp = 1;     // subnormal range shares the quantum of exponent 1
  const float quantum = std::ldexp(1.0f, exp - 7 - 3);
  float q = std::nearbyint(a / quantum);  // ties to even under the default rounding mode
  float r = q * quantum;
  // Encode r (exact in E4M3 by construction, may have rounded up into the next binade).
  if (r == 0.0f) return sign;
  int re;
  std::frexp(r, &re);
  int rexp = re - 1 + 7;
  if (rexp < 1) return sign | static_cast<uint8_t>(std::lround(r / std::ldexp(1.0f, -9)));
  if (rexp > 15) return sign | 0x7e;
  const int man = static_cast<int>(std::lround((r / std::ldexp(1.0f, rexp - 7) - 1.0f) * 8.0f));
  const uint8_t code = static_cast<uint8_t>((rexp << 3) | man);
  return sign | (code == 0x7f ? 0x7e : code);
}

}  // namespace sampan::quant
