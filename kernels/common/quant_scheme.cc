// Names of the weight formats and scale-search modes (quant_scheme.h).
#include "kernels/common/quant_scheme.h"

#include <string_view>

namespace sampan {

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

const char* scale_search_name(ScaleSearch s) {
  switch (s) {
    case ScaleSearch::kAuto: return "auto";
    case ScaleSearch::kOn: return "on";
    case ScaleSearch::kOff: return "off";
  }
  return "?";
}

bool parse_scale_search(const char* text, ScaleSearch* out) {
  const std::string_view t = text ? text : "";
  if (t == "auto") *out = ScaleSearch::kAuto;
  else if (t == "on") *out = ScaleSearch::kOn;
  else if (t == "off") *out = ScaleSearch::kOff;
  else return false;
  return true;
}

}  // namespace sampan
