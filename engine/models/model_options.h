// How a decoder model is turned into a graph beyond what its files say: weight quantization on
// load, the QuaRot-style Hadamard rotation, and the KV-cache format. Every runtime (CausalLm,
// runtime::Engine, the C API) takes one ModelBuildOptions; the CLI fills it from
// --quantization, --group-size, --asymmetric, --hadamard, --kv-cache-dtype and --kv-hadamard.
//
// A model directory written by `sampan quantize` records what was done to it in config.json
// ("quantization_config", see HfConfig::quant); loading it never re-quantizes or re-rotates.
// Asking for on-load quantization or rotation of a model that is already quantized/rotated is
// Error(kInvalidArgument).
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/cpu/attention_cpu.h"

namespace sampan::models {

enum class WeightFormat : uint8_t {
  kNone,  // as stored (f32/f16/bf16)
  kFp8,   // FP8 E4M3, one f32 scale per output channel (absmax / 448)
  kInt4,  // INT4 group-wise along the input dimension
};
// "none" "fp8" "int4"; parse accepts those (and "bf16"/"f16"/"f32" as kNone); false if unknown.
const char* weight_format_name(WeightFormat f);
bool parse_weight_format(const char* text, WeightFormat* out);

enum class ScaleSearch { kAuto, kOn, kOff };
const char* scale_search_name(ScaleSearch s);                // "auto", "on", "off"
bool parse_scale_search(const char* text, ScaleSearch* out);  // false on an unknown name

struct QuantScheme {
  WeightFormat format = WeightFormat::kNone;
  int64_t group_size = 128;        // kInt4: 32, 64 or 128
  bool symmetric = true;           // kInt4: q in [-8, 7], zero 0; else per-group int8 zero
  DType scale_dtype = DType::kF16; // kInt4 scales: kF16 or kBF16
  // kInt4: per group, pick the scale (range shrunk by 0..25 %) of least squared weight error
  // instead of the plain absmax one (quant/quantize.h). Changes only the stored scales and codes.
  // kAuto, resolved by the model loader: on for rotated weights, off otherwise. Least squared
  // *weight* error is the right goal only when the inputs of a linear are alike in size, which
  // the rotation makes them; with outlier input channels, clipping a weight that meets a 10x
  // input costs more than the finer steps gain (outlier model: KLD 0.083 -> 0.129 unrotated,
  // 0.0196 -> 0.0155 rotated). quantize_matrix treats kAuto as kOff.
  ScaleSearch scale_search = ScaleSearch::kAuto;
};

// The rotation applied offline to the weights (models/llama_rotate.h). seed picks the random
// signs of the residual-stream rotation; the online transforms (before down_proj, and on Q/K
// heads) are plain normalised Walsh-Hadamard blocks.
struct RotationOptions {
  bool enabled = false;
  uint64_t seed = 0;
};

struct ModelBuildOptions {
  QuantScheme quantization;         // on load; kNone keeps the stored weights
  RotationOptions hadamard;         // on load (before quantization); needs float weights
  cpu::KvDtype kv_cache_dtype = cpu::KvDtype::kF32;
  // Online Walsh-Hadamard on the head dimension of Q and K after RoPE (scores unchanged), so K
  // is quantized in the rotated basis where outlier channels are spread out.
  bool kv_hadamard = false;
};

}  // namespace sampan::models
