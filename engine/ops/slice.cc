// slice(x [any], starts [k], ends [k], axes [k] (opt), steps [k] (opt); all i32/i64) -> the
// elements start, start + step, ... before end along each listed axis (ONNX Slice-13). Negative
// starts/ends count from the end; then starts and ends are clamped to [0, d] for a positive step
// and to [0, d - 1] / [-1, d - 1] for a negative one, so INT64_MAX / INT64_MIN mean "to the
// end". axes default to 0..k-1, steps to 1; a step of 0 is refused. starts, ends, axes and
// steps must be known at inference (TensorDesc::value); the output is a copy (a kernel op: a
// Tensor cannot view a strided or reversed slice), and its value is known when x's is.
#include <algorithm>
#include <optional>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

// Where the output reads x: out[i] = x[offset + sum(i_d * strides[d])], in elements of x.
struct SliceMap {
  Shape shape;
  int64_t offset = 0;
  Shape strides;
};

SliceMap slice_map(const graph::Node& node, const Shape& in, const Shape& in_strides,
                   const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                   const std::optional<std::vector<int64_t>>& axes_in,
                   const std::optional<std::vector<int64_t>>& steps) {
  const size_t k = starts.size();
  SAMPAN_CHECK(ends.size() == k && (!axes_in || axes_in->size() == k) &&
                   (!steps || steps->size() == k),
               ErrorCode::kInvalidArgument,
               "node '{}' (slice): starts, ends, axes and steps differ in length ({}, {}, {}, {})",
               node.name, k, ends.size(), axes_in ? axes_in->size() : k,
               steps ? steps->size() : k);
  std::vector<int64_t> axes;
  if (axes_in) {
    axes = *axes_in;
  } else {
    for (size_t i = 0; i < k; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  const std::vector<int> norm = normalize_axes(node, axes, static_cast<int>(in.size()));
  SliceMap m{in, 0, in_strides};
  for (size_t i = 0; i < k; ++i) {
    const size_t a = static_cast<size_t>(norm[i]);
    const int64_t step = steps ? (*steps)[i] : 1;
    SAMPAN_CHECK(step != 0, ErrorCode::kInvalidArgument, "node '{}' (slice): step 0 on axis {}",
                 node.name, axes[i]);
    const int64_t d = in[a];
    int64_t start = starts[i] < 0 ? starts[i] + d : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + d : ends[i];
    int64_t len = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, d);
      end = std::clamp<int64_t>(end, 0, d);
      if (end > start) len = (end - start + step - 1) / step;
    } else if (d > 0) {
      start = std::clamp<int64_t>(start, 0, d - 1);
      end = std::clamp<int64_t>(end, -1, d - 1);
      if (start > end) len = (start - end - step - 1) / -step;
    }
    m.shape[a] = len;
    if (len > 0) m.offset += start * in_strides[a];
    m.strides[a] = in_strides[a] * step;
  }
  return m;
}

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  element_bytes(node, in[0].dtype);
  static const char* const kWhat[] = {"", "starts input", "ends input", "axes input", "steps input"};
  std::optional<std::vector<int64_t>> params[5];
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i].present) continue;
    expect_int_input(node, in[i], static_cast<int>(i), 1);
    params[i] = need_value(node, in[i], kWhat[i]);
  }
  SAMPAN_CHECK(params[1] && params[2], ErrorCode::kInvalidArgument,
               "node '{}' (slice): starts and ends are required", node.name);
  const SliceMap m = slice_map(node, in[0].shape, contiguous_strides(in[0].shape), *params[1],
                               *params[2], params[3], params[4]);
  KnownValue value;
  if (in[0].value && tracks_value(in[0].dtype, m.shape)) {
    value = pick_strided(*in[0].value, m.shape, m.offset, m.strides);
  }
  return {{m.shape, in[0].dtype, true, std::move(value)}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  std::optional<std::vector<int64_t>> params[5];
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    if (ctx.inputs[i].defined()) params[i] = read_ints(ctx.inputs[i]);
  }
  // x's own strides: a strided x (a split output) is read in place.
  const SliceMap m = slice_map(ctx.node, x.shape(), x.strides(), *params[1], *params[2],
                               params[3], params[4]);
  SAMPAN_CHECK(m.shape == ctx.outputs[0].shape(), ErrorCode::kInternal,
               "node '{}' (slice): the run's parameters give {}, inference gave {}",
               ctx.node.name, shape_str(m.shape), shape_str(ctx.outputs[0].shape()));
  copy_into(x, m.offset, m.shape, m.strides, ctx.outputs[0], ctx.runner);
}

const RegisterOp kSchema({.name = "slice", .min_inputs = 3, .max_inputs = 5, .infer = infer});
const RegisterKernel kCpu("slice", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
