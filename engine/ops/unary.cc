// unary(x) -> y, x's shape; attributes kind (required), alpha, beta, min, max.
// f32 kinds (kernels/cpu/unary_cpu.h): relu, sigmoid, tanh, erf, sqrt, exp, log, neg, abs,
// reciprocal, gelu (erf form), gelu_tanh, hard_sigmoid (alpha 0.2, beta 0.5 by default, as
// ONNX), hard_swish, clip (min/max, default -inf/+inf), leaky_relu (alpha 0.01 by default), silu,
// softplus, floor, ceil. "not" takes bool; neg and abs take i32/i64 too (abs of the most negative
// integer wraps, as in C++ two's complement). Integer and bool outputs carry their contents as
// TensorDesc::value when the input's are known.
#include "engine/ops/unary.h"

#include <array>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "engine/core/error.h"

namespace sampan::ops {
namespace {

struct KindName {
  std::string_view name;
  cpu::UnaryKind kind;
};
using cpu::UnaryKind;
constexpr std::array<KindName, 20> kKinds = {{
    {"relu", UnaryKind::kRelu}, {"sigmoid", UnaryKind::kSigmoid}, {"tanh", UnaryKind::kTanh},
    {"erf", UnaryKind::kErf}, {"sqrt", UnaryKind::kSqrt}, {"exp", UnaryKind::kExp},
    {"log", UnaryKind::kLog}, {"neg", UnaryKind::kNeg}, {"abs", UnaryKind::kAbs},
    {"reciprocal", UnaryKind::kReciprocal}, {"gelu", UnaryKind::kGelu},
    {"gelu_tanh", UnaryKind::kGeluTanh}, {"hard_sigmoid", UnaryKind::kHardSigmoid},
    {"hard_swish", UnaryKind::kHardSwish}, {"clip", UnaryKind::kClip},
    {"leaky_relu", UnaryKind::kLeakyRelu}, {"silu", UnaryKind::kSilu},
    {"softplus", UnaryKind::kSoftplus}, {"floor", UnaryKind::kFloor}, {"ceil", UnaryKind::kCeil},
}};

}  // namespace

bool unary_kind_from_name(const std::string& name, cpu::UnaryKind* out) {
  for (const KindName& kn : kKinds) {
    if (kn.name == name) {
      *out = kn.kind;
      return true;
    }
  }
  return false;
}

UnaryAttrs parse_unary_attrs(const graph::Node& node) {
  UnaryAttrs a;
  a.kind = node.attrs.get_string("kind");
  if (a.kind == "not") {
    a.domain = UnaryDomain::kNot;
    return a;
  }
  SAMPAN_CHECK(unary_kind_from_name(a.kind, &a.params.kind), ErrorCode::kInvalidArgument,
               "node '{}' (unary): unknown kind '{}'", node.name, a.kind);
  const double default_alpha = a.params.kind == UnaryKind::kLeakyRelu ? 0.01 : 0.2;
  a.params.alpha = static_cast<float>(node.attrs.get_float("alpha", default_alpha));
  a.params.beta = static_cast<float>(node.attrs.get_float("beta", 0.5));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  a.params.min = static_cast<float>(node.attrs.get_float("min", -kInf));
  a.params.max = static_cast<float>(node.attrs.get_float("max", kInf));
  return a;
}

namespace {

bool integer_kind(const UnaryAttrs& a) {
  return a.domain == UnaryDomain::kFloat &&
         (a.params.kind == UnaryKind::kNeg || a.params.kind == UnaryKind::kAbs);
}

// neg/abs of an integer, not of a bool (0/1); wraps like two's complement hardware.
int64_t apply_int(const UnaryAttrs& a, int64_t v, DType t) {
  if (a.domain == UnaryDomain::kNot) return v == 0 ? 1 : 0;
  const uint64_t u = static_cast<uint64_t>(v);
  const int64_t neg = static_cast<int64_t>(0 - u);
  const int64_t r = a.params.kind == UnaryKind::kNeg ? neg : (v < 0 ? neg : v);
  return t == DType::kI32 ? static_cast<int32_t>(static_cast<uint32_t>(r)) : r;
}

std::vector<TensorDesc> infer(const graph::Node& node, const UnaryAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const DType t = in[0].dtype;
  if (a.domain == UnaryDomain::kNot) {
    SAMPAN_CHECK(t == DType::kBool, ErrorCode::kInvalidArgument,
                 "node '{}' (unary): kind 'not' takes bool, got {}", node.name, dtype_name(t));
  } else if (integer_kind(a)) {
    SAMPAN_CHECK(t == DType::kF32 || t == DType::kI32 || t == DType::kI64,
                 ErrorCode::kInvalidArgument,
                 "node '{}' (unary): kind '{}' takes f32, i32 or i64, got {}", node.name, a.kind,
                 dtype_name(t));
  } else {
    SAMPAN_CHECK(t == DType::kF32, ErrorCode::kInvalidArgument,
                 "node '{}' (unary): kind '{}' takes f32, got {}", node.name, a.kind,
                 dtype_name(t));
  }
  TensorDesc d{in[0].shape, t};
  if (t != DType::kF32 && in[0].value) {
    std::vector<int64_t> v = *in[0].value;
    for (int64_t& e : v) e = apply_int(a, e, t);
    d.value = std::move(v);
  }
  return {d};
}

template <class T>
void run_int(const UnaryAttrs& a, const T* x, T* y, int64_t n, DType t) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(apply_int(a, static_cast<int64_t>(x[i]), t));
}

void run_cpu(const KernelContext& ctx) {
  const UnaryAttrs& a = ctx.attrs_as<UnaryAttrs>();
  const Tensor x = ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  const int64_t n = x.numel();
  switch (x.dtype()) {
    case DType::kF32:
      cpu::unary_f32(a.params, x.data<float>(), y.data<float>(), n, ctx.runner);
      return;
    case DType::kI32:
      run_int(a, x.data<int32_t>(), y.data<int32_t>(), n, DType::kI32);
      return;
    case DType::kI64:
      run_int(a, x.data<int64_t>(), y.data<int64_t>(), n, DType::kI64);
      return;
    case DType::kBool: {
      const uint8_t* xs = static_cast<const uint8_t*>(x.raw());
      uint8_t* ys = static_cast<uint8_t*>(y.raw());
      for (int64_t i = 0; i < n; ++i) ys[i] = xs[i] == 0 ? 1 : 0;
      return;
    }
    default:
      SAMPAN_CHECK(false, ErrorCode::kInternal, "node '{}' (unary): dtype {} passed inference",
                   ctx.node.name, dtype_name(x.dtype()));
  }
}

const RegisterOp kSchema(with_attrs<UnaryAttrs>({.name = "unary", .min_inputs = 1,
                                                 .max_inputs = 1},
                                                {{"kind", AttrType::kString},
                                                 {"alpha", AttrType::kFloat, false},
                                                 {"beta", AttrType::kFloat, false},
                                                 {"min", AttrType::kFloat, false},
                                                 {"max", AttrType::kFloat, false}},
                                                parse_unary_attrs, infer));
const RegisterKernel kCpu("unary", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
