// binary(a, b) -> a (kind) b with numpy broadcasting; attribute kind (docs/CLASSIC_OPS.md).
// Arithmetic on f32/i32/i64 keeps the dtype; comparisons give bool; and/or/xor take bool.
// Known integer/bool contents fold at inference (the same kernel computes them, so plan-time
// and run-time results cannot differ).
#include "engine/ops/binary.h"

#include <array>
#include <cstring>
#include <string_view>

#include "engine/core/error.h"
#include "engine/ops/broadcast.h"

namespace sampan::ops {
namespace {

struct KindName {
  std::string_view name;
  BinaryKind kind;
};
constexpr std::array<KindName, 17> kKinds = {{
    {"add", BinaryKind::kAdd},
    {"sub", BinaryKind::kSub},
    {"mul", BinaryKind::kMul},
    {"div", BinaryKind::kDiv},
    {"pow", BinaryKind::kPow},
    {"max", BinaryKind::kMax},
    {"min", BinaryKind::kMin},
    {"mod", BinaryKind::kMod},
    {"fmod", BinaryKind::kFmod},
    {"equal", BinaryKind::kEqual},
    {"less", BinaryKind::kLess},
    {"less_equal", BinaryKind::kLessEqual},
    {"greater", BinaryKind::kGreater},
    {"greater_equal", BinaryKind::kGreaterEqual},
    {"and", BinaryKind::kAnd},
    {"or", BinaryKind::kOr},
    {"xor", BinaryKind::kXor},
}};

std::string_view kind_name(BinaryKind k) {
  for (const KindName& kn : kKinds) {
    if (kn.kind == k) return kn.name;
  }
  return "?";
}

bool is_logic(BinaryKind k) {
  return k == BinaryKind::kAnd || k == BinaryKind::kOr || k == BinaryKind::kXor;
}

bool dtype_ok(BinaryKind k, DType t) {
  if (is_logic(k)) return t == DType::kBool;
  if (k == BinaryKind::kEqual && t == DType::kBool) return true;
  return t == DType::kF32 || t == DType::kI32 || t == DType::kI64;
}

bool integer_division(BinaryKind k, DType t) {
  return (k == BinaryKind::kDiv || k == BinaryKind::kMod || k == BinaryKind::kFmod) &&
         (t == DType::kI32 || t == DType::kI64);
}

// Known contents (int64) -> elements of dtype t, and back.
std::vector<uint8_t> pack(const std::vector<int64_t>& v, DType t) {
  const size_t bytes = static_cast<size_t>(dtype_bits(t) / 8);
  std::vector<uint8_t> out(v.size() * bytes);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t) {
      case DType::kI32: {
        const int32_t x = static_cast<int32_t>(v[i]);
        std::memcpy(&out[i * 4], &x, 4);
        break;
      }
      case DType::kI64: std::memcpy(&out[i * 8], &v[i], 8); break;
      default: out[i] = static_cast<uint8_t>(v[i]); break;
    }
  }
  return out;
}

std::vector<int64_t> unpack(const std::vector<uint8_t>& b, DType t, size_t n) {
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kI32: {
        int32_t x;
        std::memcpy(&x, &b[i * 4], 4);
        out[i] = x;
        break;
      }
      case DType::kI64: std::memcpy(&out[i], &b[i * 8], 8); break;
      default: out[i] = b[i]; break;
    }
  }
  return out;
}

KnownValue fold(const graph::Node& node, const BinaryAttrs& a, const TensorDesc& x,
                const TensorDesc& y, const Shape& out, DType out_dtype) {
  if (!x.value || !y.value || x.dtype == DType::kF32) return std::nullopt;
  const int64_t n = shape_numel(out);
  if (n > kMaxKnownValue) return std::nullopt;
  if (integer_division(a.kind, x.dtype)) {
    for (int64_t v : *y.value) {
      SAMPAN_CHECK(v != 0, ErrorCode::kInvalidArgument, "node '{}' (binary): integer {} by zero",
                   node.name, kind_name(a.kind));
    }
  }
  const std::vector<uint8_t> pa = pack(*x.value, x.dtype), pb = pack(*y.value, y.dtype);
  std::vector<uint8_t> py(static_cast<size_t>(n) * static_cast<size_t>(dtype_bits(out_dtype) / 8));
  const Shape sa = broadcast_strides(x.shape, contiguous_strides(x.shape), out);
  const Shape sb = broadcast_strides(y.shape, contiguous_strides(y.shape), out);
  cpu::SerialRunner serial;
  cpu::binary(a.kind, x.dtype, static_cast<int>(out.size()), out.data(), pa.data(), sa.data(),
              pb.data(), sb.data(), py.data(), serial);
  return unpack(py, out_dtype, static_cast<size_t>(n));
}

std::vector<TensorDesc> infer(const graph::Node& node, const BinaryAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const DType t = in[0].dtype;
  SAMPAN_CHECK(in[1].dtype == t, ErrorCode::kInvalidArgument,
               "node '{}' (binary): inputs are {} and {}, expected one dtype", node.name,
               dtype_name(t), dtype_name(in[1].dtype));
  SAMPAN_CHECK(dtype_ok(a.kind, t), ErrorCode::kInvalidArgument,
               "node '{}' (binary): kind '{}' does not take {} inputs", node.name,
               kind_name(a.kind), dtype_name(t));
  const Shape out = broadcast_shapes(node, in[0].shape, in[1].shape);
  SAMPAN_CHECK(static_cast<int>(out.size()) <= cpu::kMaxElementwiseRank, ErrorCode::kUnsupported,
               "node '{}' (binary): rank {} above {}", node.name, out.size(),
               cpu::kMaxElementwiseRank);
  const DType out_dtype = cpu::binary_is_comparison(a.kind) ? DType::kBool : t;
  TensorDesc d{out, out_dtype};
  d.value = fold(node, a, in[0], in[1], out, out_dtype);
  return {d};
}

// Refuses a zero divisor before anything is written (the hardware division would trap).
template <class T>
void check_divisor(const KernelContext& ctx, const Tensor& b) {
  const Tensor c = b.is_contiguous() ? b : b.contiguous();
  const T* p = c.data<T>();
  for (int64_t i = 0, n = c.numel(); i < n; ++i) {
    SAMPAN_CHECK(p[i] != 0, ErrorCode::kInvalidArgument, "node '{}' (binary): integer {} by zero",
                 ctx.node.name, kind_name(ctx.attrs_as<BinaryAttrs>().kind));
  }
}

void run_cpu(const KernelContext& ctx) {
  const BinaryAttrs& a = ctx.attrs_as<BinaryAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.inputs[1];
  const Tensor& out = ctx.outputs[0];
  SAMPAN_CHECK(out.is_contiguous(), ErrorCode::kInternal, "node '{}': output not contiguous",
               ctx.node.name);
  if (out.numel() == 0) return;
  if (integer_division(a.kind, y.dtype())) {
    if (y.dtype() == DType::kI32)
      check_divisor<int32_t>(ctx, y);
    else
      check_divisor<int64_t>(ctx, y);
  }
  const Shape sa = broadcast_strides(x.shape(), x.strides(), out.shape());
  const Shape sb = broadcast_strides(y.shape(), y.strides(), out.shape());
  cpu::binary(a.kind, x.dtype(), out.rank(), out.shape().data(), x.raw(), sa.data(), y.raw(),
              sb.data(), out.raw(), ctx.runner);
}

}  // namespace

BinaryAttrs parse_binary_attrs(const graph::Node& node) {
  const std::string& k = node.attrs.get_string("kind");
  for (const KindName& kn : kKinds) {
    if (kn.name == k) {
      BinaryAttrs a;
      a.kind = kn.kind;
      return a;
    }
  }
  SAMPAN_CHECK(false, ErrorCode::kInvalidArgument, "node '{}' (binary): unknown kind '{}'",
               node.name, k);
  return {};
}

namespace {
const RegisterOp kSchema(
    with_attrs<BinaryAttrs>({.name = "binary", .min_inputs = 2, .max_inputs = 2},
                            {{"kind", AttrType::kString}}, parse_binary_attrs, infer));
const RegisterKernel kCpu("binary", DeviceType::kCPU, run_cpu);
}  // namespace

}  // namespace sampan::ops
