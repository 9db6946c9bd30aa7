#include "engine/models/weight_quant.h"

#include <optional>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "quant/quantize.h"

namespace sampan::models {
namespace {

// quant/ reports in its own terms; the engine's callers expect Error.
[[noreturn]] void rethrow(const quant::QuantError& e) {
  throw Error(e.kind() == quant::QuantError::Kind::kInvalidData ? ErrorCode::kInvalidModel
                                                                 : ErrorCode::kInvalidArgument,
              e.what());
}

void expect(bool cond, const std::string& name, const std::string& what, const Tensor& t,
            const std::string& wanted) {
  SAMPAN_CHECK(cond, ErrorCode::kInvalidModel, "tensor '{}': {} is {}, expected {}", name, what,
               t.defined() && t.numel() > 0 ? t.str() : std::string("missing"), wanted);
}

bool present(const Tensor& t) { return t.defined() && t.numel() > 0; }

}  // namespace

QuantizedMatrix quantize_matrix(const Tensor& w, const QuantScheme& scheme,
                                const std::string& name, cpu::TaskRunner* runner) {
  SAMPAN_CHECK(w.rank() == 2 && w.device().type == DeviceType::kCPU && w.is_contiguous() &&
                   (w.dtype() == DType::kF32 || w.dtype() == DType::kF16 ||
                    w.dtype() == DType::kBF16),
               ErrorCode::kInvalidArgument,
               "tensor '{}': cannot quantize {} (expected a contiguous 2-D f32, f16 or bf16 CPU "
               "tensor)",
               name, w.str());
  const int64_t n = w.dim(0), k = w.dim(1);
  try {
    quant::check_scheme(scheme, k, name);
  } catch (const quant::QuantError& e) {
    rethrow(e);
  }
  QuantizedMatrix q;
  if (scheme.format == WeightFormat::kFp8) {
    q.data = Tensor::empty({n, k}, DType::kF8E4M3);
    q.scales = Tensor::empty({n}, DType::kF32);
  } else {
    const int64_t ng = k / scheme.group_size;
    q.data = Tensor::empty({n, k}, DType::kI4);
    q.scales = Tensor::empty({n, ng}, scheme.scale_dtype);
    if (!scheme.symmetric) q.zeros = Tensor::empty({n, ng}, DType::kI8);
  }
  std::optional<ThreadPool> own;
  if (runner == nullptr) runner = &own.emplace(0);
  try {
    quant::quantize_matrix({w.raw(), w.dtype(), n, k}, scheme,
                           {q.data.raw(), q.scales.raw(),
                            q.zeros.defined() ? q.zeros.data<int8_t>() : nullptr},
                           name, *runner);
  } catch (const quant::QuantError& e) {
    rethrow(e);
  }
  return q;
}

Tensor dequantize_matrix(const QuantizedMatrix& q, const QuantScheme& scheme,
                         const std::string& name) {
  const Tensor& d = q.data;
  if (scheme.format == WeightFormat::kFp8) {
    expect(present(d) && d.rank() == 2 && d.dtype() == DType::kF8E4M3 && d.is_contiguous(), name,
           "data", d, "a contiguous f8_e4m3 [n, k] matrix");
    const int64_t n = d.dim(0), k = d.dim(1);
    expect(present(q.scales) && q.scales.dtype() == DType::kF32 && q.scales.shape() == Shape{n} &&
               q.scales.is_contiguous(),
           name, "the scale", q.scales, fmt::format("f32[{}]", n));
    Tensor out = Tensor::empty({n, k}, DType::kF32);
    quant::dequantize_matrix({d.raw(), q.scales.raw(), nullptr}, n, k, scheme,
                             out.data<float>());
    return out;
  }
  SAMPAN_CHECK(scheme.format == WeightFormat::kInt4, ErrorCode::kInvalidArgument,
               "tensor '{}': dequantize_matrix needs format fp8 or int4", name);
  expect(present(d) && d.rank() == 2 && d.dtype() == DType::kI4 && d.is_contiguous(), name, "data",
         d, "a contiguous i4 [n, k] matrix");
  const int64_t n = d.dim(0), k = d.dim(1), g = scheme.group_size;
  SAMPAN_CHECK(g > 0 && k % g == 0, ErrorCode::kInvalidModel,
               "tensor '{}': {} columns are not a multiple of the int4 group size {}", name, k, g);
  const int64_t ng = k / g;
  const std::string scale_shape = fmt::format("{}[{}, {}]", dtype_name(scheme.scale_dtype), n, ng);
  expect(present(q.scales) && q.scales.dtype() == scheme.scale_dtype &&
             q.scales.shape() == Shape{n, ng} && q.scales.is_contiguous(),
         name, "the scale", q.scales, scale_shape);
  const bool has_zero = present(q.zeros);
  if (!scheme.symmetric || has_zero) {
    expect(has_zero && q.zeros.dtype() == DType::kI8 && q.zeros.shape() == Shape{n, ng} &&
               q.zeros.is_contiguous(),
           name, "the zero point", q.zeros, fmt::format("i8[{}, {}]", n, ng));
  }
  Tensor out = Tensor::empty({n, k}, DType::kF32);
  quant::dequantize_matrix({d.raw(), q.scales.raw(), has_zero ? q.zeros.data<int8_t>() : nullptr},
                           n, k, scheme, out.data<float>());
  return out;
}

}  // namespace sampan::models
