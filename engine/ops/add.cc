// add(a, b) -> a + b, element-wise, same shape, f32.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_dtype(node, in[1], 1, DType::kF32);
  SAMPAN_CHECK(in[0].shape == in[1].shape, ErrorCode::kInvalidArgument,
               "node '{}' (add): shapes {} and {} differ", node.name, shape_str(in[0].shape),
               shape_str(in[1].shape));
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  // Element-wise and memory-bound: one contiguous pass; the compiler vectorises it.
  const Tensor a = ctx.inputs[0].contiguous();
  const Tensor b = ctx.inputs[1].contiguous();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = ctx.outputs[0].data<float>();
  const int64_t n = a.numel();
  constexpr int64_t kChunk = 1 << 16;
  ctx.runner.run((n + kChunk - 1) / kChunk, [&](int64_t t) {
    const int64_t end = std::min(n, (t + 1) * kChunk);
    for (int64_t i = t * kChunk; i < end; ++i) py[i] = pa[i] + pb[i];
  });
}

const RegisterOp kSchema({.name = "add", .min_inputs = 2, .max_inputs = 2, .infer = infer});
const RegisterKernel kCpu("add", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
