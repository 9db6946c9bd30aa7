// Weight quantization: the formats of kernels/common/quant_scheme.h (byte layouts in
// kernels/common/gemm_weights.h) on plain host buffers, and the exact dequantization every
// kernel is tested against. quant/ sits between the kernels and the engine: it knows no engine
// type; engine/models/weight_quant.h offers the same on Tensors.
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
//      ties; the sum in double, in the order cpu::int4_group_errors states, so that ties fall
//      the same way everywhere): clipping a few extreme weights buys finer steps for all the
//      others. Never worse than c = 1, which is plain round-to-nearest.
// Non-finite weights are QuantError(kInvalidData) naming the tensor and the element.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/dtype.h"
#include "kernels/common/quant_scheme.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::quant {

// What the quantizer throws: a one-line message naming the tensor. The engine maps kInvalidArgument
// to Error(kInvalidArgument) (the scheme or the matrix cannot be quantized) and kInvalidData to
// Error(kInvalidModel) (the weights themselves are bad).
class QuantError : public std::runtime_error {
 public:
  enum class Kind { kInvalidArgument, kInvalidData };
  QuantError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A row-major, contiguous [n, k] matrix of f32, f16 or bf16 in host memory.
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t n = 0, k = 0;
};

// The quantized form of an [n, k] matrix, in buffers the caller owns and sized as above:
//   FP8:  data [n, k] bytes, scales [n] f32, zeros null.
//   INT4: data [n, k / 2] bytes, scales [n, k / g] of scheme.scale_dtype (2 bytes each),
//         zeros [n, k / g] int8 when asymmetric, else null.
struct QuantizedBuffers {
  void* data = nullptr;
  void* scales = nullptr;
  int8_t* zeros = nullptr;
};
struct QuantizedConstBuffers {
  const void* data = nullptr;
  const void* scales = nullptr;
  const int8_t* zeros = nullptr;  // null: zero point 0
};

// Checks that `scheme` can quantize a matrix of k columns (format fp8 or int4, a valid int4
// group size dividing k, an f16/bf16 scale type); QuantError(kInvalidArgument) naming `name`.
void check_scheme(const QuantScheme& scheme, int64_t k, const std::string& name);

// Quantizes w into out (scheme checked first). Rows are spread over `runner`. `name` only labels
// errors.
void quantize_matrix(const MatrixView& w, const QuantScheme& scheme, const QuantizedBuffers& out,
                     const std::string& name, cpu::TaskRunner& runner);

// The reference dequantization of an [n, k] matrix quantized with `scheme` into out [n, k] f32.
void dequantize_matrix(const QuantizedConstBuffers& q, int64_t n, int64_t k,
                       const QuantScheme& scheme, float* out);

}  // namespace sampan::quant
