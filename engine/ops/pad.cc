// pad(x [d0, ..., dr-1], pads i64 [2r] (needs values), value (opt, scalar of x's dtype))
//   -> y [d0 + b0 + e0, ...]; attribute mode: "constant" (default), "reflect", "edge".
// pads lists the r begins, then the r ends (ONNX order); a negative pad crops. Any dtype of
// 1, 4 or 8 bytes.
#include <cstring>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

enum class PadMode { kConstant, kReflect, kEdge };

struct PadAttrs final : OpAttrs {
  PadMode mode = PadMode::kConstant;
};

PadAttrs parse(const graph::Node& node) {
  PadAttrs a;
  const std::string mode = node.attrs.get_string("mode", "constant");
  if (mode == "constant") a.mode = PadMode::kConstant;
  else if (mode == "reflect") a.mode = PadMode::kReflect;
  else if (mode == "edge") a.mode = PadMode::kEdge;
  else fail(ErrorCode::kUnsupported, "node '{}' (pad): mode '{}' is not supported (constant, reflect, edge)", node.name, mode);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const PadAttrs& a, const std::vector<TensorDesc>& in) {
  const int64_t r = static_cast<int64_t>(in[0].shape.size());
  SAMPAN_CHECK(in[1].value.has_value(), ErrorCode::kUnsupported,
               "node '{}' (pad): the pads are computed at run time; only pads known before the run are supported",
               node.name);
  const std::vector<int64_t>& p = *in[1].value;
  SAMPAN_CHECK(static_cast<int64_t>(p.size()) == 2 * r, ErrorCode::kInvalidArgument,
               "node '{}' (pad): {} pads for a tensor of rank {} (2 per dimension)", node.name, p.size(), r);
  const int bytes = dtype_bits(in[0].dtype) / 8;
  SAMPAN_CHECK(bytes == 1 || bytes == 4 || bytes == 8, ErrorCode::kUnsupported,
               "node '{}' (pad): dtype {} is not supported", node.name, dtype_name(in[0].dtype));
  if (in.size() > 2 && in[2].present) {
    SAMPAN_CHECK(in[2].dtype == in[0].dtype && shape_numel(in[2].shape) == 1, ErrorCode::kInvalidArgument,
                 "node '{}' (pad): the pad value must be one {} value", node.name, dtype_name(in[0].dtype));
  }
  Shape out = in[0].shape;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t n = in[0].shape[static_cast<size_t>(d)];
    out[static_cast<size_t>(d)] = n + p[static_cast<size_t>(d)] + p[static_cast<size_t>(d + r)];
    SAMPAN_CHECK(out[static_cast<size_t>(d)] >= 0, ErrorCode::kInvalidArgument,
                 "node '{}' (pad): pads {} and {} crop dimension {} of size {} below zero", node.name,
                 p[static_cast<size_t>(d)], p[static_cast<size_t>(d + r)], d, n);
    if (a.mode == PadMode::kReflect) {
      SAMPAN_CHECK(p[static_cast<size_t>(d)] < n && p[static_cast<size_t>(d + r)] < n, ErrorCode::kInvalidArgument,
                   "node '{}' (pad): reflect pads of dimension {} must be smaller than its size {}", node.name, d, n);
    }
    if (a.mode != PadMode::kConstant && out[static_cast<size_t>(d)] > 0) {
      SAMPAN_CHECK(n > 0, ErrorCode::kInvalidArgument, "node '{}' (pad): cannot {} an empty dimension {}",
                   node.name, a.mode == PadMode::kReflect ? "reflect" : "extend", d);
    }
  }
  return {{out, in[0].dtype}};
}

// Source index along one dimension for output index i (before the begin pad), or -1: the value.
int64_t source(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return i < 0 ? 0 : n - 1;
    case PadMode::kReflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t k = i % period;
      if (k < 0) k += period;
      return k < n ? k : period - k;
    }
  }
  return -1;
}

void run_cpu(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<PadAttrs>();
  const Tensor x = ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  const Tensor pads = ctx.inputs[1].contiguous();
  const int r = x.rank();
  std::vector<int64_t> begin(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) {
    begin[static_cast<size_t>(d)] = pads.dtype() == DType::kI64 ? pads.data<int64_t>()[d] : pads.data<int32_t>()[d];
  }
  const size_t es = static_cast<size_t>(dtype_bits(x.dtype()) / 8);
  uint8_t value[8] = {0};
  if (ctx.inputs.size() > 2 && ctx.inputs[2].defined() && ctx.inputs[2].numel() == 1) {
    std::memcpy(value, ctx.inputs[2].contiguous().raw(), es);
  }
  if (r == 0) {
    std::memcpy(y.raw(), x.raw(), es);
    return;
  }
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  const int64_t cols = ys.back();
  const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
  const Shape xstr = contiguous_strides(xs);
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(y.raw());
  const int64_t b_last = begin[static_cast<size_t>(r - 1)];
  const int64_t n_last = xs.back();
  ctx.runner.run(std::max<int64_t>(1, std::min<int64_t>(rows, 64)), [&](int64_t t) {
    const int64_t n_tasks = std::max<int64_t>(1, std::min<int64_t>(rows, 64));
    for (int64_t row = rows * t / n_tasks; row < rows * (t + 1) / n_tasks; ++row) {
      // Which source row (if any) feeds this output row.
      int64_t rem = row, off = 0;
      bool padded = false;
      for (int d = r - 2; d >= 0; --d) {
        const int64_t i = rem % ys[static_cast<size_t>(d)];
        rem /= ys[static_cast<size_t>(d)];
        const int64_t s = source(i - begin[static_cast<size_t>(d)], xs[static_cast<size_t>(d)], a.mode);
        if (s < 0) padded = true;
        else off += s * xstr[static_cast<size_t>(d)];
      }
      uint8_t* out = dst + static_cast<size_t>(row * cols) * es;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t s = padded ? -1 : source(c - b_last, n_last, a.mode);
        std::memcpy(out + static_cast<size_t>(c) * es, s < 0 ? value : src + static_cast<size_t>(off + s) * es, es);
      }
    }
  });
}

const RegisterOp kSchema(with_attrs<PadAttrs>({.name = "pad", .min_inputs = 2, .max_inputs = 3},
                                              {{"mode", AttrType::kString, false}}, parse, infer));
const RegisterKernel kCpu("pad", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
