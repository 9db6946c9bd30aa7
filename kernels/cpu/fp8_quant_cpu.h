// Row arithmetic of FP8 E4M3 weight quantization (quant/quantize.cc, per output channel:
// scale = absmax / 448), vectorised (AVX2, the CPU baseline).
#pragma once

#include <cstdint>

namespace sampan::cpu {

// x: [k]. False if an element is not finite (the caller finds which); otherwise amax = max |x|.
bool fp8_row_absmax(const float* x, int64_t k, float* amax);

// out[c] = the OCP E4M3 code of x[c] / scale, c < k: round to nearest even, saturating to +-448
// (0x7e / 0xfe), subnormals as multiples of 2^-9; the code quant::f32_to_fp8_e4m3 gives for
// the same finite f32. x finite, scale > 0.
void fp8_encode_row(const float* x, int64_t k, float scale, uint8_t* out);

}  // namespace sampan::cpu
