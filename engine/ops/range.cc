// range(start, limit, delta: scalars of one dtype, i32 or i64) -> [n] with element i = start +
// i * delta, n = max(0, ceil((limit - start) / delta)) (ONNX Range). The three values must be
// known at inference: the output's length depends on them, and the planner only has integer
// values (TensorDesc::value), which is why a float range is refused. A delta of 0 is refused.
// The output's value is known when it has at most kMaxKnownValue elements.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/shape_util.h"

namespace sampan::ops {
namespace {

std::vector<int64_t> range_values(const graph::Node& node, int64_t start, int64_t limit,
                                  int64_t delta) {
  SAMPAN_CHECK(delta != 0, ErrorCode::kInvalidArgument, "node '{}' (range): delta is 0",
               node.name);
  const int64_t span = limit - start;
  int64_t n = 0;
  if (delta > 0 && span > 0) n = (span + delta - 1) / delta;
  if (delta < 0 && span < 0) n = (span + delta + 1) / delta;
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i * delta;
  return v;
}

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  static const char* const kWhat[] = {"start input", "limit input", "delta input"};
  int64_t s[3];
  for (int i = 0; i < 3; ++i) {
    expect_int_input(node, in[static_cast<size_t>(i)], i, 0);
    SAMPAN_CHECK(in[static_cast<size_t>(i)].dtype == in[0].dtype, ErrorCode::kInvalidArgument,
                 "node '{}' (range): input {} is {}, input 0 is {}", node.name, i,
                 dtype_name(in[static_cast<size_t>(i)].dtype), dtype_name(in[0].dtype));
    s[i] = need_value(node, in[static_cast<size_t>(i)], kWhat[i])[0];
  }
  std::vector<int64_t> v = range_values(node, s[0], s[1], s[2]);
  const Shape out{static_cast<int64_t>(v.size())};
  return {{out, in[0].dtype, true, make_value(in[0].dtype, out, std::move(v))}};
}

void run_cpu(const KernelContext& ctx) {
  const std::vector<int64_t> v =
      range_values(ctx.node, read_ints(ctx.inputs[0])[0], read_ints(ctx.inputs[1])[0],
                   read_ints(ctx.inputs[2])[0]);
  SAMPAN_CHECK(static_cast<int64_t>(v.size()) == ctx.outputs[0].numel(), ErrorCode::kInternal,
               "node '{}' (range): the run's bounds give {} elements, inference gave {}",
               ctx.node.name, v.size(), ctx.outputs[0].numel());
  write_ints(ctx.outputs[0], v);
}

const RegisterOp kSchema({.name = "range", .min_inputs = 3, .max_inputs = 3, .infer = infer});
const RegisterKernel kCpu("range", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
