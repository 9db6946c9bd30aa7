// cast(x) -> x's shape in dtype `to`; among f32, i32, i64, bool, u8 (attribute `to`, a
// dtype_name). f32 -> integer truncates toward zero and saturates to the target's range (NaN
// gives 0: C++ leaves these undefined, a model must not crash on them); integer -> narrower
// integer wraps (two's complement, as numpy); -> bool is x != 0 (so NaN is true); bool -> x is
// 0 or 1. Known integer/bool contents fold at inference through the same conversion.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::ops {
namespace {

struct CastAttrs final : OpAttrs {
  DType to = DType::kF32;
};

bool castable(DType t) {
  return t == DType::kF32 || t == DType::kI32 || t == DType::kI64 || t == DType::kBool ||
         t == DType::kU8;
}

CastAttrs parse(const graph::Node& node) {
  CastAttrs a;
  const std::string& name = node.attrs.get_string("to");
  const std::optional<DType> t = parse_dtype(name);
  SAMPAN_CHECK(t && castable(*t), ErrorCode::kInvalidArgument,
               "node '{}' (cast): cannot cast to '{}' (f32, i32, i64, bool or u8)", node.name,
               name);
  a.to = *t;
  return a;
}

template <class D, class S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != S{0};
  } else if constexpr (std::is_floating_point_v<S> && !std::is_floating_point_v<D>) {
    if (v != v) return D{0};
    // Both bounds are exactly representable powers of two (or 0) in f32.
    constexpr float lo = static_cast<float>(std::numeric_limits<D>::lowest());
    constexpr float hi = static_cast<float>(std::numeric_limits<D>::max()) + 1.0f;
    if (v <= lo) return std::numeric_limits<D>::lowest();
    if (v >= hi) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);  // int -> narrower int wraps (C++20), int -> f32 rounds
  }
}

template <class S, class D>
void convert_all(const S* x, D* y, int64_t n, cpu::TaskRunner& runner) {
  cpu::util::parallel_for(runner, n, 1 << 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = convert<D>(x[i]);
  });
}

// Calls fn(T{}) with T the C++ element type of t (bool is one byte of 0/1).
template <class Fn>
void with_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn(float{});
    case DType::kI32: return fn(int32_t{});
    case DType::kI64: return fn(int64_t{});
    case DType::kU8: return fn(uint8_t{});
    case DType::kBool: return fn(bool{});
    default: break;
  }
}

void cast_buffer(DType from, DType to, const void* x, void* y, int64_t n,
                 cpu::TaskRunner& runner) {
  with_type(from, [&](auto s) {
    with_type(to, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      convert_all<S, D>(static_cast<const S*>(x), static_cast<D*>(y), n, runner);
    });
  });
}

std::vector<TensorDesc> infer(const graph::Node& node, const CastAttrs& a,
                              const std::vector<TensorDesc>& in) {
  SAMPAN_CHECK(castable(in[0].dtype), ErrorCode::kInvalidArgument,
               "node '{}' (cast): cannot cast from {} (f32, i32, i64, bool or u8)", node.name,
               dtype_name(in[0].dtype));
  TensorDesc d{in[0].shape, a.to};
  if (in[0].value && in[0].dtype != DType::kF32 && a.to != DType::kF32) {
    // Through the run-time conversion: int64 contents -> source dtype -> target -> int64.
    const std::vector<int64_t>& v = *in[0].value;
    const int64_t n = static_cast<int64_t>(v.size());
    std::vector<int64_t> out(v.size());
    std::vector<uint8_t> src(v.size() * 8), dst(v.size() * 8);
    cpu::SerialRunner serial;
    cast_buffer(DType::kI64, in[0].dtype, v.data(), src.data(), n, serial);
    cast_buffer(in[0].dtype, a.to, src.data(), dst.data(), n, serial);
    cast_buffer(a.to, DType::kI64, dst.data(), out.data(), n, serial);
    d.value = std::move(out);
  }
  return {d};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor x = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  if (x.numel() == 0) return;
  cast_buffer(x.dtype(), y.dtype(), x.raw(), y.raw(), x.numel(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<CastAttrs>({.name = "cast", .min_inputs = 1, .max_inputs = 1},
                                               {{"to", AttrType::kString}}, parse, infer));
const RegisterKernel kCpu("cast", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
