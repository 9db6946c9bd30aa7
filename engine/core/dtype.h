// DType names and parsing. The enum itself lives in kernels/common/dtype.h (lowest layer).
#pragma once

#include <optional>
#include <string_view>

#include "kernels/common/dtype.h"

namespace sampan {

// "f32", "f16", "bf16", "f8_e4m3", "i8", "i4", "i32", "i64".
const char* dtype_name(DType t);
// Accepts dtype_name() spellings and common aliases ("float32", "bfloat16", "float16").
std::optional<DType> parse_dtype(std::string_view text);
// safetensors header spellings: "F32", "F16", "BF16", "F8_E4M3", "I8", "I32", "I64".
std::optional<DType> dtype_from_safetensors(std::string_view text);
const char* dtype_safetensors_name(DType t);
bool dtype_is_float(DType t);

}  // namespace sampan
