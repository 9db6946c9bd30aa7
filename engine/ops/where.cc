// where(cond bool, a, b) -> cond ? a : b with numpy broadcasting of all three (same dtype a, b).
// Known contents fold at inference when all three inputs' are known.
#include "engine/core/error.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/binary_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kBool);
  SAMPAN_CHECK(in[1].dtype == in[2].dtype, ErrorCode::kInvalidArgument,
               "node '{}' (where): inputs 1 and 2 are {} and {}, expected one dtype", node.name,
               dtype_name(in[1].dtype), dtype_name(in[2].dtype));
  SAMPAN_CHECK(dtype_bits(in[1].dtype) % 8 == 0, ErrorCode::kUnsupported,
               "node '{}' (where): {} inputs are not supported", node.name,
               dtype_name(in[1].dtype));
  const Shape out =
      broadcast_shapes(node, broadcast_shapes(node, in[0].shape, in[1].shape), in[2].shape);
  SAMPAN_CHECK(static_cast<int>(out.size()) <= cpu::kMaxElementwiseRank,
               ErrorCode::kUnsupported, "node '{}' (where): rank {} above {}", node.name,
               out.size(), cpu::kMaxElementwiseRank);
  TensorDesc d{out, in[1].dtype};
  const int64_t n = shape_numel(out);
  if (in[0].value && in[1].value && in[2].value && n <= kMaxKnownValue) {
    // Selection copies values unchanged, so it can work on the int64 contents directly.
    const Shape sc = broadcast_strides(in[0].shape, contiguous_strides(in[0].shape), out);
    const Shape sa = broadcast_strides(in[1].shape, contiguous_strides(in[1].shape), out);
    const Shape sb = broadcast_strides(in[2].shape, contiguous_strides(in[2].shape), out);
    std::vector<uint8_t> cond(in[0].value->size());
    for (size_t i = 0; i < cond.size(); ++i) cond[i] = (*in[0].value)[i] != 0;
    std::vector<int64_t> v(static_cast<size_t>(n));
    cpu::SerialRunner serial;
    cpu::where(static_cast<int>(out.size()), out.data(), cond.data(), sc.data(),
               in[1].value->data(), sa.data(), in[2].value->data(), sb.data(), 8, v.data(),
               serial);
    d.value = std::move(v);
  }
  return {d};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& c = ctx.inputs[0];
  const Tensor& a = ctx.inputs[1];
  const Tensor& b = ctx.inputs[2];
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal, "node '{}': output not contiguous",
               ctx.node.name);
  if (y.numel() == 0) return;
  const Shape sc = broadcast_strides(c.shape(), c.strides(), y.shape());
  const Shape sa = broadcast_strides(a.shape(), a.strides(), y.shape());
  const Shape sb = broadcast_strides(b.shape(), b.strides(), y.shape());
  cpu::where(y.rank(), y.shape().data(), c.data<uint8_t>(), sc.data(), a.raw(), sa.data(),
             b.raw(), sb.data(), dtype_bits(y.dtype()) / 8, y.raw(), ctx.runner);
}

const RegisterOp kSchema({.name = "where", .min_inputs = 3, .max_inputs = 3, .infer = infer});
const RegisterKernel kCpu("where", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
