// Bulk conversions between f32 and the 16-bit float formats (vectorised, dispatched on the ISA).
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"

namespace sampan::cpu {

// src: [n] of type `src_type` (kF32, kF16 or kBF16); dst: [n] f32. Exact for every number and
// infinity; a signalling f16 NaN may come out quietened (hardware conversion). Another
// src_type fills dst with NaN (the caller checks types; kernels do not throw).
void convert_to_f32(DType src_type, const void* src, float* dst, int64_t n);
// Round to nearest even, NaN preserved; bit-exact with f32_to_bf16 / f32_to_f16 of
// kernels/common/half.h, f32 subnormals included. src: [n]; dst: [n].
void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n);

}  // namespace sampan::cpu
