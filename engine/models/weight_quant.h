// Weight quantization on Tensors: the engine's side of quant/quantize.h (which states the formats
// and works on plain host buffers). Used by the model loaders (quantization on load), `sampan
// quantize` and the tests.
#pragma once

#include <string>

#include "engine/core/tensor.h"
#include "engine/models/model_options.h"

namespace sampan::cpu {
class TaskRunner;
}

namespace sampan::models {

struct QuantizedMatrix {
  Tensor data;    // FP8: [n, k] kF8E4M3; INT4: [n, k] kI4 (packed)
  Tensor scales;  // FP8: [n] f32; INT4: [n, k / g] of scheme.scale_dtype
  Tensor zeros;   // INT4 asymmetric only: [n, k / g] kI8
};

// w: [n, k] f32, f16 or bf16 (any contiguous CPU tensor). `name` only labels errors. Rows are
// spread over `runner` (a pool of one worker per core when null).
// A scheme that cannot quantize w (format, int4 group size or k % group_size) is
// Error(kInvalidArgument) naming the tensor and sizes; a non-finite weight Error(kInvalidModel).
QuantizedMatrix quantize_matrix(const Tensor& w, const QuantScheme& scheme,
                                const std::string& name, cpu::TaskRunner* runner = nullptr);

// The reference dequantization: [n, k] f32. Checks shapes and dtypes (Error(kInvalidModel)
// naming `name`: missing scales, wrong group count, shape mismatch).
Tensor dequantize_matrix(const QuantizedMatrix& q, const QuantScheme& scheme,
                         const std::string& name);

}  // namespace sampan::models
