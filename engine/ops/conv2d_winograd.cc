// conv2d_winograd(x [N, C/B, H, W, B] blocked, w [O/B, 36, C/B, B, B] Winograd-transformed,
//                 bias [O/B * B] (opt), residual [N, O/B, Ho, Wo, B] (opt))
//   -> y [N, O/B, Ho, Wo, B] = act(conv3x3(x, w) + bias + residual)
// A 3x3 conv with stride 1, dilation 1 and group 1 by Winograd F(4x4, 3x3)
// (kernels/cpu/conv_winograd_cpu.h); the layout pass transforms the weights once, as a constant
// (winograd_weight). Attributes are conv2d's; strides and dilations must be 1, group 1.
#include "engine/ops/conv2d_winograd.h"

#include <vector>

#include "engine/core/error.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/conv_winograd_cpu.h"

namespace sampan::ops {

bool winograd_runs(int64_t block) { return cpu::winograd_available(block); }

Tensor winograd_weight(const Tensor& w, int64_t block) {
  const Tensor wc = w.contiguous();
  const int64_t o = w.dim(0), c = w.dim(1);
  std::vector<float> u(static_cast<size_t>(cpu::winograd_weight_floats(o, c, block)));
  cpu::winograd_transform_weights(o, c, block, wc.data<float>(), u.data());
  return Tensor::from_f32({(o + block - 1) / block, cpu::kWinogradPoints, (c + block - 1) / block,
                           block, block},
                          u);
}

namespace {

Conv2dAttrs parse(const graph::Node& node) {
  Conv2dAttrs a = parse_conv2d_attrs(node);
  SAMPAN_CHECK(a.group == 1 && a.strides == (std::array<int64_t, 2>{1, 1}) &&
                   a.dilations == (std::array<int64_t, 2>{1, 1}),
               ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_winograd): strides, dilations and group must be 1", node.name);
  return a;
}

// x: [N, C/B, H, W, B]; w: [O/B, 36, C/B, B, B].
cpu::WinogradConvShape conv_shape(const Conv2dAttrs& a, const Shape& x, const Shape& w) {
  cpu::WinogradConvShape s;
  s.n = x[0];
  s.in_blocks = x[1];
  s.h = x[2];
  s.w = x[3];
  s.out_blocks = w[0];
  s.block = w[4];
  s.pad_t = a.pads[0];
  s.pad_l = a.pads[1];
  s.pad_b = a.pads[2];
  s.pad_r = a.pads[3];
  return s;
}

std::vector<TensorDesc> infer(const graph::Node& node, const Conv2dAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_dtype(node, in[1], 1, DType::kF32);
  expect_rank(node, in[0], 0, 5);
  expect_rank(node, in[1], 1, 5);
  const int64_t block = w[4];
  SAMPAN_CHECK((block == 8 || block == 16) && w[3] == block && x[4] == block &&
                   w[1] == cpu::kWinogradPoints && w[2] == x[1] && w[0] >= 1,
               ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_winograd): weight {} does not fit the input {}", node.name,
               shape_str(w), shape_str(x));
  const cpu::WinogradConvShape s = conv_shape(a, x, w);
  SAMPAN_CHECK(s.out_h() >= 1 && s.out_w() >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_winograd): input {} is smaller than 3x3 with pads", node.name,
               shape_str(x));
  if (in.size() > 2 && in[2].present) {
    expect_rank(node, in[2], 2, 1);
    expect_dtype(node, in[2], 2, DType::kF32);
    expect_dim(node, in[2], 2, 0, w[0] * block);
  }
  const Shape y = {x[0], w[0], s.out_h(), s.out_w(), block};
  if (in.size() > 3 && in[3].present) {
    expect_dtype(node, in[3], 3, DType::kF32);
    SAMPAN_CHECK(in[3].shape == y, ErrorCode::kInvalidArgument,
                 "node '{}' (conv2d_winograd): input 3 (residual) is {}, expected the output's {}",
                 node.name, shape_str(in[3].shape), shape_str(y));
  }
  return {{y, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Conv2dAttrs& a = ctx.attrs_as<Conv2dAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[1];
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal,
               "node '{}' (conv2d_winograd): output not contiguous", ctx.node.name);
  SAMPAN_CHECK(cpu::winograd_available(w.dim(4)), ErrorCode::kUnsupported,
               "node '{}' (conv2d_winograd): block {} does not run on this CPU", ctx.node.name,
               w.dim(4));
  Tensor hx, hw, hb, hr;
  const float* bias = conv_input_given(ctx, 2) ? contiguous_data(ctx.inputs[2], hb) : nullptr;
  const float* residual = conv_input_given(ctx, 3) ? contiguous_data(ctx.inputs[3], hr) : nullptr;
  cpu::conv2d_winograd(conv_shape(a, x.shape(), w.shape()), contiguous_data(x, hx),
                       contiguous_data(w, hw), bias, residual, a.epilogue, y.data<float>(),
                       ctx.runner);
}

const RegisterOp kSchema(with_attrs<Conv2dAttrs>({.name = "conv2d_winograd", .min_inputs = 2,
                                                  .max_inputs = 4},
                                                 {{"strides", AttrType::kInts, false},
                                                  {"pads", AttrType::kInts, false},
                                                  {"dilations", AttrType::kInts, false},
                                                  {"group", AttrType::kInt, false},
                                                  {"activation", AttrType::kString, false},
                                                  {"act_min", AttrType::kFloat, false},
                                                  {"act_max", AttrType::kFloat, false}},
                                                 parse, infer));
const RegisterKernel kCpu("conv2d_winograd", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
