// The per-group arithmetic of INT4 weight quantization (quant/quantize.cc quantizes on load and
// in `sampan quantize`): a group's range, the squared error of one (scale, zero) candidate and
// the group's codes, vectorised (AVX2, the CPU baseline). Every result is the same number as the
// plain loop over the group's elements in order would give, except int4_group_errors' sums, whose
// order is stated below; group sizes are multiples of 8 (32, 64, 128).
#pragma once

#include <cstdint>

namespace sampan::cpu {

// x: [g]. False if an element is not finite (the caller finds which). Otherwise lo = min(0,
// min x) and hi = max(0, max x) (a zero of either sign where the range does not pass 0).
bool int4_group_range(const float* x, int64_t g, float* lo, float* hi);

// q_c = clamp(nearbyint(x_c / scale) + zero, -8, 7) (ties to even, as nearbyint under the
// default rounding mode), c < g, into codes [g]. scale is nonzero; x finite.
void int4_group_codes(const float* x, int64_t g, float scale, int zero, int8_t* codes);

// For n <= 16 candidates (scale_i nonzero, zero_i): errors[i] = sum_c (x_c - (q_c - zero_i) *
// scale_i)^2 with q_c as above, the product rounded to f32, the difference d_c in double, and 8
// partial sums in double, s_(c % 8) = fma(d_c, d_c, s_(c % 8)) in increasing c; errors[i] =
// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). The order is fixed so that a tie between two
// candidates falls the same way on every machine. x is read and widened once for all candidates.
void int4_group_errors(const float* x, int64_t g, const float* scales, const int* zeros, int n,
                       double* errors);

}  // namespace sampan::cpu
