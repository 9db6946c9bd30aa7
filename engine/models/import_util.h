// Small tensor helpers the model-file importers share (onnx_import.cc, paddle_import.cc,
// paddle_legacy_import.cc). Each importer words its own errors; these only read and make values.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/core/tensor.h"

namespace sampan::models {

// The elements of an i32/i64 tensor as int64; nullopt for any other dtype.
inline std::optional<std::vector<int64_t>> tensor_ints(const Tensor& t) {
  if (t.dtype() != DType::kI64 && t.dtype() != DType::kI32) return std::nullopt;
  const Tensor c = t.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(c.numel()));
  for (size_t k = 0; k < out.size(); ++k) {
    out[k] = c.dtype() == DType::kI64 ? c.data<int64_t>()[k] : c.data<int32_t>()[k];
  }
  return out;
}

// A tensor of `shape` whose every element is `value` (f32, i32, i64 or bool; other dtypes are
// left uninitialised, which the importers refuse before calling).
inline Tensor filled(const std::vector<int64_t>& shape, DType dtype, double value) {
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  for (int64_t k = 0; k < n; ++k) {
    switch (dtype) {
      case DType::kF32: t.data<float>()[k] = static_cast<float>(value); break;
      case DType::kI32: t.data<int32_t>()[k] = static_cast<int32_t>(value); break;
      case DType::kI64: t.data<int64_t>()[k] = static_cast<int64_t>(value); break;
      case DType::kBool: t.data<uint8_t>()[k] = value != 0; break;
      default: break;
    }
  }
  return t;
}

}  // namespace sampan::models
