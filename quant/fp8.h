// FP8 E4M3 (OCP "fn" variant: no infinities, 0x7f/0xff are NaN, largest finite 448).
#pragma once

#include <cstdint>

namespace sampan::quant {

float fp8_e4m3_to_f32(uint8_t v);
// Round to nearest even; saturates to ±448 (as cuBLASLt and vLLM do for weights); NaN -> NaN.
uint8_t f32_to_fp8_e4m3(float f);

}  // namespace sampan::quant
