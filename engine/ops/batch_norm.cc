// batch_norm(x [N, C, ...] f32, scale [C], bias [C], mean [C], var [C]) -> y, x's shape; eps
// (default 1e-5). Inference form: y = (x - mean) / sqrt(var + eps) * scale + bias, per channel
// (dimension 1). Usually folded into the preceding conv2d by fold_conv_batch_norm; this kernel
// serves the rest (a norm after a pool or on a graph input).
#include <cmath>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

struct BatchNormAttrs final : OpAttrs {
  float eps = 1e-5f;
};

BatchNormAttrs parse(const graph::Node& node) {
  BatchNormAttrs a;
  a.eps = static_cast<float>(node.attrs.get_float("eps", 1e-5));
  SAMPAN_CHECK(a.eps >= 0.0f, ErrorCode::kInvalidArgument, "node '{}' (batch_norm): eps {} < 0",
               node.name, a.eps);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const BatchNormAttrs&,
                              const std::vector<TensorDesc>& in) {
  SAMPAN_CHECK(in[0].shape.size() >= 2, ErrorCode::kInvalidArgument,
               "node '{}' (batch_norm): input 0 is {}, expected rank >= 2", node.name,
               shape_str(in[0].shape));
  expect_dtype(node, in[0], 0, DType::kF32);
  for (int i = 1; i < 5; ++i) {
    expect_rank(node, in[static_cast<size_t>(i)], i, 1);
    expect_dtype(node, in[static_cast<size_t>(i)], i, DType::kF32);
    expect_dim(node, in[static_cast<size_t>(i)], i, 0, in[0].shape[1]);
  }
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const float eps = ctx.attrs_as<BatchNormAttrs>().eps;
  const Tensor x = ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  const int64_t n = x.dim(0);
  const int64_t c = x.dim(1);
  const int64_t inner = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  std::vector<Tensor> p;
  for (int i = 1; i < 5; ++i) p.push_back(ctx.inputs[static_cast<size_t>(i)].contiguous());
  const float* scale = p[0].data<float>();
  const float* bias = p[1].data<float>();
  const float* mean = p[2].data<float>();
  const float* var = p[3].data<float>();
  const float* xs = x.data<float>();
  float* ys = y.data<float>();
  ctx.runner.run(n * c, [&](int64_t plane) {
    const int64_t ch = plane % c;
    const float mul = scale[ch] / std::sqrt(var[ch] + eps);
    const float add = bias[ch] - mean[ch] * mul;
    const float* xr = xs + plane * inner;
    float* yr = ys + plane * inner;
    for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] * mul + add;
  });
}

const RegisterOp kSchema(with_attrs<BatchNormAttrs>({.name = "batch_norm", .min_inputs = 5,
                                                     .max_inputs = 5},
                                                    {{"eps", AttrType::kFloat, false}}, parse,
                                                    infer));
const RegisterKernel kCpu("batch_norm", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
