// conv_transpose2d(x [N, C, H, W] f32, w [C, O/group, kh, kw] f32, bias [O] (opt))
//   -> y [N, O, Ho, Wo], the transposed convolution (ONNX ConvTranspose, PyTorch
//   ConvTranspose2d; kernels/cpu/conv_transpose_cpu.h states the sum).
// Attributes (all optional): strides [2] (1, 1), pads [4] top, left, bottom, right (0s),
// dilations [2] (1, 1), group (1), output_padding [2] (0, 0; each below its stride or its
// dilation, as PyTorch requires).
// Ho = s_h·(H - 1) + output_padding_h + d_h·(kh - 1) + 1 - pad_top - pad_bottom, likewise Wo.
#include <algorithm>
#include <array>

#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/conv_transpose_cpu.h"

namespace sampan::ops {
namespace {

constexpr const char* kOp = "conv_transpose2d";

struct ConvTransposeAttrs final : OpAttrs {
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};
  std::array<int64_t, 2> dilations{1, 1};
  std::array<int64_t, 2> output_padding{0, 0};
  int64_t group = 1;
};

ConvTransposeAttrs parse(const graph::Node& node) {
  ConvTransposeAttrs a;
  a.strides = conv_ints_attr<2>(node, kOp, "strides", {1, 1}, 1);
  a.pads = conv_ints_attr<4>(node, kOp, "pads", {0, 0, 0, 0}, 0);
  a.dilations = conv_ints_attr<2>(node, kOp, "dilations", {1, 1}, 1);
  a.output_padding = conv_ints_attr<2>(node, kOp, "output_padding", {0, 0}, 0);
  a.group = node.attrs.get_int("group", 1);
  SAMPAN_CHECK(a.group >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv_transpose2d): group = {} < 1", node.name, a.group);
  for (int i = 0; i < 2; ++i) {
    SAMPAN_CHECK(a.output_padding[i] < std::max(a.strides[i], a.dilations[i]),
                 ErrorCode::kInvalidArgument,
                 "node '{}' (conv_transpose2d): output_padding {} must be below the stride {} or "
                 "the dilation {}",
                 node.name, a.output_padding[i], a.strides[i], a.dilations[i]);
  }
  return a;
}

cpu::ConvTransposeShape shape_of(const ConvTransposeAttrs& a, const Shape& x, const Shape& w) {
  cpu::ConvTransposeShape s;
  s.n = x[0];
  s.c = x[1];
  s.h = x[2];
  s.w = x[3];
  s.o = w[1] * a.group;
  s.kh = w[2];
  s.kw = w[3];
  s.group = a.group;
  s.stride_h = a.strides[0];
  s.stride_w = a.strides[1];
  s.pad_t = a.pads[0];
  s.pad_l = a.pads[1];
  s.pad_b = a.pads[2];
  s.pad_r = a.pads[3];
  s.dil_h = a.dilations[0];
  s.dil_w = a.dilations[1];
  s.out_pad_h = a.output_padding[0];
  s.out_pad_w = a.output_padding[1];
  return s;
}

std::vector<TensorDesc> infer(const graph::Node& node, const ConvTransposeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 4);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 4);
  expect_dtype(node, in[1], 1, DType::kF32);
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  SAMPAN_CHECK(w[0] == x[1] && x[1] % a.group == 0, ErrorCode::kInvalidArgument,
               "node '{}' (conv_transpose2d): weight {} needs {} input channels (group {} "
               "dividing them), the input {} has {}",
               node.name, shape_str(w), w[0], a.group, shape_str(x), x[1]);
  SAMPAN_CHECK(w[1] >= 1 && w[2] >= 1 && w[3] >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv_transpose2d): empty weight {}", node.name, shape_str(w));
  const cpu::ConvTransposeShape s = shape_of(a, x, w);
  SAMPAN_CHECK(s.out_h() >= 1 && s.out_w() >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv_transpose2d): pads {} leave no output for input {}", node.name,
               fmt::join(a.pads, ", "), shape_str(x));
  if (in.size() > 2 && in[2].present) {
    expect_rank(node, in[2], 2, 1);
    expect_dtype(node, in[2], 2, DType::kF32);
    expect_dim(node, in[2], 2, 0, s.o);
  }
  return {{{x[0], s.o, s.out_h(), s.out_w()}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const ConvTransposeAttrs& a = ctx.attrs_as<ConvTransposeAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[1];
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal,
               "node '{}' (conv_transpose2d): output not contiguous", ctx.node.name);
  Tensor hx, hw, hb;
  const float* bias = conv_input_given(ctx, 2) ? contiguous_data(ctx.inputs[2], hb) : nullptr;
  cpu::conv_transpose2d(shape_of(a, x.shape(), w.shape()), contiguous_data(x, hx),
                        contiguous_data(w, hw), bias, y.data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<ConvTransposeAttrs>(
    {.name = "conv_transpose2d", .min_inputs = 2, .max_inputs = 3},
    {{"strides", AttrType::kInts, false},
     {"pads", AttrType::kInts, false},
     {"dilations", AttrType::kInts, false},
     {"output_padding", AttrType::kInts, false},
     {"group", AttrType::kInt, false}},
    parse, infer));
const RegisterKernel kCpu("conv_transpose2d", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
