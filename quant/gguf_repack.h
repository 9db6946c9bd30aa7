// GGUF block weights mapped losslessly onto Sampan's own quantized layouts, where Sampan's
// kernels for that layout run faster than its GGUF ones (issue 18: "Q4_0 and Q8_0 may map
// losslessly onto Sampan's own int4/int8 layouts where that is faster").
//
// Q4_0 -> INT4 group 32, symmetric, f16 scales: a Q4_0 block (f16 d, 16 bytes: byte l holds
// element l in its low nibble and element l + 16 in its high one) is w = d * (n - 8), n in 0..15;
// Sampan's kI4 row is w = s * q with q = n - 8 in -8..7 as a two's complement nibble, element 2j
// in the low nibble of byte j, and s the f16 d itself (its bits copied, NaN and infinity too).
// Every weight dequantizes to the same f32 on both sides. Measured on an Emerald Rapids VM
// (TinyLlama shape, decode, 2 threads): the INT4 decode kernels stream these bytes 1.17-1.2x as
// fast as the GGUF Q4_0 kernel.
#pragma once

#include <cstdint>

namespace sampan::quant {

// rows rows of k elements (k a multiple of 32) of Q4_0 blocks at src (18 bytes per 32
// elements, rows back to back) into data [rows][k / 2] (kI4 packing) and scales
// [rows][k / 32] (f16 bits).
void q4_0_to_int4(const uint8_t* src, int64_t rows, int64_t k, uint8_t* data, uint16_t* scales);

}  // namespace sampan::quant
