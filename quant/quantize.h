// Weight quantization: the formats of models/model_options.h as tensors, and the exact
// dequantization every kernel is tested against.
//
// FP8: data [n, k] kF8E4M3, scales [n] f32, scale = absmax(row) / 448 (1 for an all-zero row);
//      data = fp8(w / scale) rounded to nearest even, saturated.
// INT4: data [n, k] kI4 (packed, [n, k/2] bytes; element 2j in the low nibble, signed q in
//      [-8, 7]); scales [n, k / g] of scheme.scale_dtype; zeros [n, k / g] kI8 or undefined.
//      Symmetric: scale = absmax(group) / 7 (q = clamp(round(w / scale), -8, 7), zero 0).
//      Asymmetric: the range [min(group, 0), max(group, 0)] maps to [-8, 7]:
//      scale = (max - min) / 15, zero = clamp(round(-8 - min / scale), -128, 127) so that
//      w ~ (q - zero) * scale; q = clamp(round(w / scale) + zero, -8, 7).
//      A group of zeros gets scale 1 (never 0, never NaN). The scale is rounded to scale_dtype
//      BEFORE the q are computed, so the stored scale is the one the rounding used.
//      scheme.scale_search == kOn (kAuto counts as kOff here; the model loader resolves it):
//      the range above is first shrunk by a factor c in
//      {1, 0.975, ..., 0.75} (min and max both times c for asymmetric groups) and the c of least
//      squared error sum (w - (q - zero) * scale)^2 over the group is kept (the largest c on
//      ties): clipping a few extreme weights buys finer steps for all the others. Never worse
//      than c = 1, which is plain round-to-nearest.
// Non-finite weights are Error(kInvalidModel) naming the tensor.
#pragma once

#include <string>

#include "engine/core/tensor.h"
#include "engine/models/model_options.h"

namespace sampan::quant {

struct QuantizedMatrix {
  Tensor data;    // see above
  Tensor scales;
  Tensor zeros;   // INT4 asymmetric only
};

// w: [n, k] f32, f16 or bf16 (any contiguous CPU tensor). `name` only labels errors.
// INT4 needs k % group_size == 0 (else Error(kInvalidArgument) naming the tensor and sizes).
QuantizedMatrix quantize_matrix(const Tensor& w, const models::QuantScheme& scheme,
                                const std::string& name);

// The reference dequantization: [n, k] f32. Checks shapes and dtypes (Error(kInvalidModel)
// naming `name`: missing scales, wrong group count, shape mismatch).
Tensor dequantize_matrix(const QuantizedMatrix& q, const models::QuantScheme& scheme,
                         const std::string& name);

}  // namespace sampan::quant
