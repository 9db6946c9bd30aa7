// layer_norm(x [..., d_axis, ..., d_last] f32, scale (opt), bias (opt)) -> x's shape; attributes
// axis (default -1), eps (default 1e-5). Normalises over dims axis..rank-1 together; scale and
// bias have those dims' shape (or are 1-D of their element count).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/layer_norm_cpu.h"

namespace sampan::ops {
namespace {

struct LayerNormAttrs final : OpAttrs {
  int64_t axis = -1;  // normalised against the input's rank by infer / the kernel
  float eps = 1e-5f;
};

LayerNormAttrs parse(const graph::Node& node) {
  LayerNormAttrs a;
  a.axis = node.attrs.get_int("axis", -1);
  a.eps = static_cast<float>(node.attrs.get_float("eps", 1e-5));
  SAMPAN_CHECK(a.eps >= 0.0f, ErrorCode::kInvalidArgument, "node '{}' (layer_norm): eps {} < 0",
               node.name, a.eps);
  return a;
}

int64_t norm_axis(const graph::Node& node, int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  SAMPAN_CHECK(axis >= -r && axis < r, ErrorCode::kInvalidArgument,
               "node '{}' (layer_norm): axis {} out of range for rank {}", node.name, axis, r);
  return axis < 0 ? axis + r : axis;
}

bool present(const std::vector<TensorDesc>& in, size_t i) { return i < in.size() && in[i].present; }

std::vector<TensorDesc> infer(const graph::Node& node, const LayerNormAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kF32);
  const int64_t axis = norm_axis(node, a.axis, in[0].shape.size());
  const Shape tail(in[0].shape.begin() + axis, in[0].shape.end());
  for (size_t i = 1; i < 3; ++i) {
    if (!present(in, i)) continue;
    expect_dtype(node, in[i], static_cast<int>(i), DType::kF32);
    const bool flat = in[i].shape.size() == 1 && in[i].shape[0] == shape_numel(tail);
    SAMPAN_CHECK(in[i].shape == tail || flat, ErrorCode::kInvalidArgument,
                 "node '{}' (layer_norm): input {} ({}) has shape {}, expected {}", node.name, i,
                 i == 1 ? "scale" : "bias", shape_str(in[i].shape), shape_str(tail));
  }
  return {{in[0].shape, DType::kF32}};
}

const float* optional_data(const KernelContext& ctx, size_t i) {
  if (i >= ctx.inputs.size() || !ctx.inputs[i].defined()) return nullptr;
  SAMPAN_CHECK(ctx.inputs[i].is_contiguous(), ErrorCode::kInternal,
               "node '{}': input {} not contiguous", ctx.node.name, i);
  return ctx.inputs[i].data<float>();
}

void run_cpu(const KernelContext& ctx) {
  const LayerNormAttrs& a = ctx.attrs_as<LayerNormAttrs>();
  const Tensor x = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  const int64_t axis = norm_axis(ctx.node, a.axis, static_cast<size_t>(x.rank()));
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.dim(static_cast<int>(d));
  const int64_t n = rows == 0 ? 0 : x.numel() / rows;
  cpu::layer_norm(rows, n, x.data<float>(), n, optional_data(ctx, 1), optional_data(ctx, 2),
                  a.eps, y.data<float>(), n, ctx.runner);
}

const RegisterOp kSchema(with_attrs<LayerNormAttrs>(
    {.name = "layer_norm", .min_inputs = 1, .max_inputs = 3},
    {{"axis", AttrType::kInt, false}, {"eps", AttrType::kFloat, false}}, parse, infer));
const RegisterKernel kCpu("layer_norm", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
