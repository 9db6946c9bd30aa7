// Bulk conversions between f32 and the 16-bit float formats (vectorised, dispatched on the ISA).
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"

namespace sampan::cpu {

// src: [n] of type `src_type` (kF32, kF16 or kBF16); dst: [n] f32.
void convert_to_f32(DType src_type, const void* src, float* dst, int64_t n);
// Round to nearest even, NaN preserved.
void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n);

}  // namespace sampan::cpu
