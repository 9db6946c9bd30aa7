// concat(x0, x1, ... [same dtype, same rank, equal dims but the axis]) -> the inputs one after
// another along axis (attribute, required, negative from the end). Any whole-byte dtype; a copy
// (kernel op). When every input's value is known (shape pieces) the output's is too.
#include <limits>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

struct ConcatAttrs final : OpAttrs {
  int64_t axis = 0;  // as given; normalised against the inputs' rank
};

ConcatAttrs parse(const graph::Node& node) {
  ConcatAttrs a;
  a.axis = node.attrs.get_int("axis");
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const ConcatAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const Shape& first = in[0].shape;
  const int r = static_cast<int>(first.size());
  SAMPAN_CHECK(r > 0, ErrorCode::kInvalidArgument, "node '{}' (concat): input 0 is a scalar",
               node.name);
  const int axis = normalize_axis(node, a.axis, r);
  element_bytes(node, in[0].dtype);
  Shape out = first;
  out[static_cast<size_t>(axis)] = 0;
  bool all_known = true;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    SAMPAN_CHECK(in[i].present, ErrorCode::kInvalidArgument,
                 "node '{}' (concat): input {} is absent", node.name, i);
    SAMPAN_CHECK(in[i].dtype == in[0].dtype, ErrorCode::kInvalidArgument,
                 "node '{}' (concat): input {} is {}, input 0 is {}", node.name, i,
                 dtype_name(in[i].dtype), dtype_name(in[0].dtype));
    SAMPAN_CHECK(static_cast<int>(s.size()) == r, ErrorCode::kInvalidArgument,
                 "node '{}' (concat): input {} has shape {}, input 0 has shape {} (rank {})",
                 node.name, i, shape_str(s), shape_str(first), r);
    for (int d = 0; d < r; ++d) {
      SAMPAN_CHECK(d == axis || s[static_cast<size_t>(d)] == first[static_cast<size_t>(d)],
                   ErrorCode::kInvalidArgument,
                   "node '{}' (concat): input {} has shape {}, input 0 has shape {}: only dim {} "
                   "may differ",
                   node.name, i, shape_str(s), shape_str(first), axis);
    }
    out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    all_known = all_known && in[i].value.has_value();
  }
  KnownValue value;
  if (all_known && tracks_value(in[0].dtype, out)) {
    // Row-major: for each index of the dims before the axis, each input's block in turn.
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < r; ++d) {
      if (d < axis) outer *= first[static_cast<size_t>(d)];
      if (d > axis) inner *= first[static_cast<size_t>(d)];
    }
    std::vector<int64_t> v;
    for (int64_t o = 0; o < outer; ++o) {
      for (const TensorDesc& t : in) {
        const int64_t block = t.shape[static_cast<size_t>(axis)] * inner;
        v.insert(v.end(), t.value->begin() + o * block, t.value->begin() + (o + 1) * block);
      }
    }
    value = std::move(v);
  }
  return {{out, in[0].dtype, true, std::move(value)}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& y = ctx.outputs[0];
  const int axis = normalize_axis(ctx.node, ctx.attrs_as<ConcatAttrs>().axis, y.rank());
  int64_t begin = 0;
  for (const Tensor& x : ctx.inputs) {
    const int64_t n = x.dim(axis);
    copy_into(x, 0, x.shape(), x.strides(), y.slice(axis, begin, begin + n), ctx.runner);
    begin += n;
  }
}

const RegisterOp kSchema(with_attrs<ConcatAttrs>({.name = "concat", .min_inputs = 1,
                                                  .max_inputs = std::numeric_limits<int>::max()},
                                                 {{"axis", AttrType::kInt}}, parse, infer));
const RegisterKernel kCpu("concat", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
