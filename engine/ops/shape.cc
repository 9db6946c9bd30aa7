// shape(x [any]) -> i64 [end - start]: the dims start..end-1 of x; attributes start (default 0)
// and end (default rank), negative counting from the end and clamped to [0, rank] as in ONNX
// Shape-15. The value is always known at inference (it depends only on x's shape), which is
// what lets the Shape -> Gather -> Concat -> Reshape chains of ONNX exports fold at plan time.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

struct ShapeAttrs final : OpAttrs {
  int64_t start = 0;
  std::optional<int64_t> end;  // absent: the rank
};

ShapeAttrs parse(const graph::Node& node) {
  ShapeAttrs a;
  a.start = node.attrs.get_int("start", 0);
  if (node.attrs.has("end")) a.end = node.attrs.get_int("end");
  return a;
}

// The dims of a rank-`rank` input that the node reports.
std::vector<int64_t> picked_dims(const ShapeAttrs& a, const Shape& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  auto clamp = [rank](int64_t i) {
    if (i < 0) i += rank;
    return i < 0 ? 0 : (i > rank ? rank : i);
  };
  const int64_t begin = clamp(a.start), end = clamp(a.end.value_or(rank));
  if (end <= begin) return {};
  return {shape.begin() + begin, shape.begin() + end};
}

std::vector<TensorDesc> infer(const graph::Node&, const ShapeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  std::vector<int64_t> dims = picked_dims(a, in[0].shape);
  const Shape out{static_cast<int64_t>(dims.size())};
  return {{out, DType::kI64, true, make_value(DType::kI64, out, std::move(dims))}};
}

void run_cpu(const KernelContext& ctx) {
  write_ints(ctx.outputs[0], picked_dims(ctx.attrs_as<ShapeAttrs>(), ctx.inputs[0].shape()));
}

const RegisterOp kSchema(with_attrs<ShapeAttrs>({.name = "shape", .min_inputs = 1,
                                                 .max_inputs = 1},
                                                {{"start", AttrType::kInt, false},
                                                 {"end", AttrType::kInt, false}},
                                                parse, infer));
const RegisterKernel kCpu("shape", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
