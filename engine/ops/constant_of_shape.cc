// constant_of_shape(shape i32/i64 [k]) -> a tensor of that shape (k = 0: a scalar) filled with
// `value`; attributes value (float, default 0) and dtype (dtype_name: f32, i32, i64, u8, bool;
// default f32). The shape input must be known at inference (TensorDesc::value); an integer/bool
// output of at most kMaxKnownValue elements has its value known too.
#include <cmath>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

struct ConstantOfShapeAttrs final : OpAttrs {
  double value = 0.0;
  DType dtype = DType::kF32;
};

ConstantOfShapeAttrs parse(const graph::Node& node) {
  ConstantOfShapeAttrs a;
  a.value = node.attrs.get_float("value", 0.0);
  const std::string name = node.attrs.get_string("dtype", "f32");
  const std::optional<DType> d = parse_dtype(name);
  SAMPAN_CHECK(d == DType::kF32 || d == DType::kI32 || d == DType::kI64 || d == DType::kU8 ||
                   d == DType::kBool,
               ErrorCode::kInvalidArgument,
               "node '{}' (constant_of_shape): dtype '{}' is not one of f32, i32, i64, u8, bool",
               node.name, name);
  a.dtype = *d;
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const ConstantOfShapeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_int_input(node, in[0], 0, 1);
  const std::vector<int64_t>& dims = need_value(node, in[0], "output shape");
  for (int64_t d : dims) {
    SAMPAN_CHECK(d >= 0, ErrorCode::kInvalidArgument,
                 "node '{}' (constant_of_shape): the shape {} has a negative dim", node.name,
                 shape_str(dims));
  }
  const Shape out(dims.begin(), dims.end());
  KnownValue value;
  if (tracks_value(a.dtype, out)) {
    value = make_value(a.dtype, out,
                       std::vector<int64_t>(static_cast<size_t>(shape_numel(out)),
                                            static_cast<int64_t>(a.value)));
  }
  return {{out, a.dtype, true, std::move(value)}};
}

void run_cpu(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<ConstantOfShapeAttrs>();
  const Tensor& y = ctx.outputs[0];
  const int64_t n = y.numel();
  if (a.dtype == DType::kF32) {
    std::fill(y.data<float>(), y.data<float>() + n, static_cast<float>(a.value));
    return;
  }
  write_ints(y, std::vector<int64_t>(static_cast<size_t>(n), static_cast<int64_t>(a.value)));
}

const RegisterOp kSchema(with_attrs<ConstantOfShapeAttrs>(
    {.name = "constant_of_shape", .min_inputs = 1, .max_inputs = 1},
    {{"value", AttrType::kFloat, false}, {"dtype", AttrType::kString, false}}, parse, infer));
const RegisterKernel kCpu("constant_of_shape", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
