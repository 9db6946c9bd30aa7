#include "engine/ops/shape_util.h"

#include "engine/core/error.h"
#include "kernels/cpu/transpose_cpu.h"

namespace sampan::ops {

int normalize_axis(const graph::Node& node, int64_t axis, int rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  SAMPAN_CHECK(a >= 0 && a < rank, ErrorCode::kInvalidArgument,
               "node '{}' ({}): axis {} is out of range for rank {}", node.name, node.op, axis,
               rank);
  return static_cast<int>(a);
}

std::vector<int> normalize_axes(const graph::Node& node, const std::vector<int64_t>& axes,
                                int rank) {
  std::vector<int> out;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t axis : axes) {
    const int a = normalize_axis(node, axis, rank);
    SAMPAN_CHECK(!seen[static_cast<size_t>(a)], ErrorCode::kInvalidArgument,
                 "node '{}' ({}): axis {} is repeated", node.name, node.op, axis);
    seen[static_cast<size_t>(a)] = true;
    out.push_back(a);
  }
  return out;
}

const std::vector<int64_t>& need_value(const graph::Node& node, const TensorDesc& t,
                                       std::string_view what) {
  SAMPAN_CHECK(t.value.has_value(), ErrorCode::kInvalidArgument,
               "node '{}' ({}): the {} is computed at run time; only shapes known before the run "
               "are supported",
               node.name, node.op, what);
  return *t.value;
}

void expect_int_input(const graph::Node& node, const TensorDesc& t, int index, int rank) {
  SAMPAN_CHECK(t.dtype == DType::kI32 || t.dtype == DType::kI64, ErrorCode::kInvalidArgument,
               "node '{}' ({}): input {} is {}, expected i32 or i64", node.name, node.op, index,
               dtype_name(t.dtype));
  const int r = static_cast<int>(t.shape.size());
  // A scalar may come as [] or [1] (exporters write both).
  const bool ok = rank < 0 || r == rank || (rank == 0 && r == 1 && t.shape[0] == 1);
  SAMPAN_CHECK(ok, ErrorCode::kInvalidArgument,
               "node '{}' ({}): input {} has shape {}, expected rank {}", node.name, node.op,
               index, shape_str(t.shape), rank);
}

bool tracks_value(DType dtype, const Shape& shape) {
  const bool integer = dtype == DType::kI32 || dtype == DType::kI64 || dtype == DType::kU8 ||
                       dtype == DType::kBool;
  return integer && shape_numel(shape) <= kMaxKnownValue;
}

KnownValue make_value(DType dtype, const Shape& shape, std::vector<int64_t> values) {
  if (!tracks_value(dtype, shape)) return std::nullopt;
  for (int64_t& v : values) {
    switch (dtype) {
      case DType::kI32: v = static_cast<int32_t>(v); break;
      case DType::kU8: v = static_cast<uint8_t>(v); break;
      case DType::kBool: v = v != 0; break;
      default: break;
    }
  }
  return values;
}

std::vector<int64_t> pick_strided(const std::vector<int64_t>& values, const Shape& out_shape,
                                  int64_t base, const Shape& strides) {
  const int64_t n = shape_numel(out_shape);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, off = base;
    for (size_t d = out_shape.size(); d-- > 0;) {
      off += (rest % out_shape[d]) * strides[d];
      rest /= out_shape[d];
    }
    out[static_cast<size_t>(i)] = values[static_cast<size_t>(off)];
  }
  return out;
}

int element_bytes(const graph::Node& node, DType dtype) {
  const int bits = dtype_bits(dtype);
  SAMPAN_CHECK(bits % 8 == 0, ErrorCode::kUnsupported, "node '{}' ({}): {} is not supported",
               node.name, node.op, dtype_name(dtype));
  return bits / 8;
}

std::vector<int64_t> read_ints(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (c.dtype()) {
      case DType::kI32: v[i] = c.data<int32_t>()[i]; break;
      case DType::kI64: v[i] = c.data<int64_t>()[i]; break;
      case DType::kU8:
      case DType::kBool: v[i] = c.data<uint8_t>()[i]; break;
      default:
        fail(ErrorCode::kInternal, "read_ints of {}", c.str());
    }
  }
  return v;
}

void write_ints(const Tensor& t, const std::vector<int64_t>& values) {
  SAMPAN_CHECK(t.is_contiguous() && t.numel() == static_cast<int64_t>(values.size()),
               ErrorCode::kInternal, "write_ints: {} values into {}", values.size(), t.str());
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    switch (t.dtype()) {
      case DType::kF32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::kI32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::kI64: t.data<int64_t>()[i] = v; break;
      case DType::kU8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
      case DType::kBool: t.data<uint8_t>()[i] = v != 0; break;
      default:
        fail(ErrorCode::kInternal, "write_ints into {}", t.str());
    }
  }
}

Tensor reshaped(const graph::Node& node, const Tensor& x, const Shape& shape) {
  SAMPAN_CHECK(shape_numel(shape) == x.numel(), ErrorCode::kInternal,
               "node '{}' ({}): {} viewed as {}", node.name, node.op, x.str(), shape_str(shape));
  if (x.is_contiguous()) return x.reshape(shape);
  SAMPAN_CHECK(x.device().type == DeviceType::kCPU, ErrorCode::kUnsupported,
               "node '{}' ({}): input {} is not contiguous; on {} only contiguous inputs are "
               "supported",
               node.name, node.op, x.str(), x.device().str());
  return x.contiguous().reshape(shape);
}

void copy_into(const Tensor& x, int64_t offset, const Shape& shape, const Shape& strides,
               const Tensor& y, cpu::TaskRunner& runner) {
  SAMPAN_CHECK(y.shape() == shape && y.dtype() == x.dtype() && strides.size() == shape.size(),
               ErrorCode::kInternal, "copy_into: {} read as {} into {}", x.str(),
               shape_str(shape), y.str());
  if (shape_numel(shape) == 0) return;
  const int eb = dtype_bits(x.dtype()) / 8;
  const char* src = static_cast<const char*>(x.raw()) + offset * eb;
  cpu::copy_strided(static_cast<int>(shape.size()), shape.data(), src, strides.data(), y.raw(),
                    y.strides().data(), eb, runner);
}

}  // namespace sampan::ops
