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
#include <memory>
#include <vector>

#include "engine/core/dtype.h"
#include "kernels/common/kv_format.h"
#include "kernels/common/quant_scheme.h"

namespace sampan::models {

struct LoraAdapter;  // lora_adapter.h

// The quantization scheme and KV-cache formats are value types of every layer, defined once in
// kernels/common (quant_scheme.h, kv_format.h); the names below keep the engine's spelling.
using sampan::QuantScheme;
using sampan::ScaleSearch;
using sampan::WeightFormat;
using sampan::parse_scale_search;
using sampan::parse_weight_format;
using sampan::scale_search_name;
using sampan::weight_format_name;

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
  KvDtype kv_cache_dtype = KvDtype::kF32;
  // Online Walsh-Hadamard on the head dimension of Q and K after RoPE (scores unchanged), so K
  // is quantized in the rotated basis where outlier channels are spread out.
  bool kv_hadamard = false;
  // LoRA adapters the graph serves besides the base (lora_adapter.h; --lora DIR). With any, every
  // projection an adapter targets gets a `lora` node (engine/ops/lora.cc) and the graph takes
  // "lora_ids" [n_tokens] i32 (TensorRole::kLoraIds): per token the index of its adapter here,
  // or -1 for the base. Each is checked against the model (check_lora_adapter) when it builds.
  std::vector<std::shared_ptr<const LoraAdapter>> lora;
};

}  // namespace sampan::models
