// How weights are quantized: one definition for the quantizer (quant/), the model loaders, the
// option parsers (CLI, serve configs, the C API) and the GEMM kernels that read the result
// (kernels/common/gemm_weights.h states the byte formats).
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/host_device.h"

namespace sampan {

enum class WeightFormat : uint8_t {
  kNone,  // as stored (f32/f16/bf16)
  kFp8,   // FP8 E4M3, one f32 scale per output channel (absmax / 448)
  kInt4,  // INT4 group-wise along the input dimension
};
// "none" "fp8" "int4"; parse accepts those (and "bf16"/"f16"/"f32" as kNone); false if unknown.
const char* weight_format_name(WeightFormat f);
bool parse_weight_format(const char* text, WeightFormat* out);

// The INT4 group sizes every kernel implements (the one rule; every parser checks against it).
SAMPAN_HD constexpr bool int4_group_size_ok(int64_t g) { return g == 32 || g == 64 || g == 128; }
// For messages: "32, 64 or 128".
inline constexpr const char* kInt4GroupSizesText = "32, 64 or 128";

enum class ScaleSearch { kAuto, kOn, kOff };
const char* scale_search_name(ScaleSearch s);                // "auto", "on", "off"
bool parse_scale_search(const char* text, ScaleSearch* out);  // false on an unknown name

struct QuantScheme {
  WeightFormat format = WeightFormat::kNone;
  int64_t group_size = 128;        // kInt4: int4_group_size_ok
  bool symmetric = true;           // kInt4: q in [-8, 7], zero 0; else per-group int8 zero
  DType scale_dtype = DType::kF16; // kInt4 scales: kF16 or kBF16
  // kInt4: per group, pick the scale (range shrunk by 0..25 %) of least squared weight error
  // instead of the plain absmax one (quant/quantize.h). Changes only the stored scales and codes.
  // kAuto, resolved by the model loader: on for rotated weights, off otherwise. Least squared
  // *weight* error is the right goal only when the inputs of a linear are alike in size, which
  // the rotation makes them; with outlier input channels, clipping a weight that meets a 10x
  // input costs more than the finer steps gain (outlier model: KLD 0.083 -> 0.129 unrotated,
  // 0.0196 -> 0.0155 rotated). The quantizer treats kAuto as kOff.
  ScaleSearch scale_search = ScaleSearch::kAuto;
};

}  // namespace sampan
