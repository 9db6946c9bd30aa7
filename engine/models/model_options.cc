#include "engine/models/model_options.h"

#include <string_view>

namespace sampan::models {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kNone: return "none";
    case WeightFormat::kFp8: return "fp8";
    case WeightFormat::kInt4: return "int4";
  }
  return "?";
}

bool parse_weight_format(const char* text, WeightFormat* out) {
  const std::string_view t = text ? text : "";
  if (t == "none" || t == "bf16" || t == "f16" || t == "f32") *out = WeightFormat::kNone;
  else if (t == "fp8" || t == "f8_e4m3") *out = WeightFormat::kFp8;
  else if (t == "int4" || t == "i4") *out = WeightFormat::kInt4;
  else return false;
  return true;
}

}  // namespace sampan::models
