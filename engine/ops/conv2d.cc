// conv2d(x [N, C, H, W] f32, w [O, C/group, kh, kw] f32, bias [O] (opt), residual [N, O, Ho, Wo]
//        (opt)) -> y [N, O, Ho, Wo] = act(conv(x, w) + bias + residual)
// Attributes (all optional): strides [2] (1, 1), pads [4] top, left, bottom, right (0s),
// dilations [2] (1, 1), group (1), activation "none" | "relu" | "clip" | "sigmoid" |
// "hard_swish" ("none"), act_min / act_max (clip bounds, default -inf / +inf), precision "f32" |
// "bf16" ("f32"; "bf16" takes w as bf16 and computes the product on bf16-rounded inputs with f32
// sums, see kernels/cpu/conv_cpu.h; not for convs whose groups read one channel each).
// Ho = (H + pad_top + pad_bottom - dil_h * (kh - 1) - 1) / stride_h + 1, likewise Wo.
#include "engine/ops/conv2d.h"

#include <limits>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {

bool conv_activation_from_name(const std::string& name, cpu::ConvActivation* out) {
  using cpu::ConvActivation;
  if (name == "none") *out = ConvActivation::kNone;
  else if (name == "relu") *out = ConvActivation::kRelu;
  else if (name == "clip") *out = ConvActivation::kClip;
  else if (name == "sigmoid") *out = ConvActivation::kSigmoid;
  else if (name == "hard_swish") *out = ConvActivation::kHardSwish;
  else return false;
  return true;
}

Conv2dAttrs parse_conv2d_attrs(const graph::Node& node) {
  Conv2dAttrs a;
  a.strides = conv_ints_attr<2>(node, "conv2d", "strides", {1, 1}, 1);
  a.pads = conv_ints_attr<4>(node, "conv2d", "pads", {0, 0, 0, 0}, 0);
  a.dilations = conv_ints_attr<2>(node, "conv2d", "dilations", {1, 1}, 1);
  a.group = node.attrs.get_int("group", 1);
  SAMPAN_CHECK(a.group >= 1, ErrorCode::kInvalidArgument, "node '{}' (conv2d): group = {} < 1",
               node.name, a.group);
  const std::string act = node.attrs.get_string("activation", "none");
  SAMPAN_CHECK(conv_activation_from_name(act, &a.epilogue.act), ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): unknown activation '{}'", node.name, act);
  a.epilogue.act_min = static_cast<float>(
      node.attrs.get_float("act_min", -std::numeric_limits<double>::infinity()));
  a.epilogue.act_max = static_cast<float>(
      node.attrs.get_float("act_max", std::numeric_limits<double>::infinity()));
  const std::string precision = node.attrs.get_string("precision", "f32");
  SAMPAN_CHECK(precision == "f32" || precision == "bf16", ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): unknown precision '{}' (f32, bf16)", node.name, precision);
  a.bf16 = precision == "bf16";
  SAMPAN_CHECK(!(a.epilogue.act_min > a.epilogue.act_max), ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): act_min {} > act_max {}", node.name, a.epilogue.act_min,
               a.epilogue.act_max);
  return a;
}

namespace {

cpu::ConvShape conv_shape(const Conv2dAttrs& a, const Shape& x, const Shape& w) {
  cpu::ConvShape s;
  s.n = x[0];
  s.c = x[1];
  s.h = x[2];
  s.w = x[3];
  s.o = w[0];
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
  return s;
}

std::vector<TensorDesc> infer(const graph::Node& node, const Conv2dAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 4);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 4);
  expect_dtype(node, in[1], 1, a.bf16 ? DType::kBF16 : DType::kF32);
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  SAMPAN_CHECK(x[1] % a.group == 0 && w[0] % a.group == 0, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): group {} does not divide the {} input and {} output channels",
               node.name, a.group, x[1], w[0]);
  SAMPAN_CHECK(w[1] * a.group == x[1], ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): weight {} has {} input channels per group, the input {} "
               "needs {} (group {})",
               node.name, shape_str(w), w[1], shape_str(x), x[1] / a.group, a.group);
  SAMPAN_CHECK(w[2] >= 1 && w[3] >= 1 && w[0] >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): empty weight {}", node.name, shape_str(w));
  SAMPAN_CHECK(!a.bf16 || w[1] > 1 || a.group == 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): precision bf16 needs a conv with more than one input channel "
               "per group (group {}, weight {})",
               node.name, a.group, shape_str(w));
  const cpu::ConvShape s = conv_shape(a, x, w);
  const int64_t ho = s.out_h();
  const int64_t wo = s.out_w();
  SAMPAN_CHECK(ho >= 1 && wo >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d): input {} is smaller than the dilated kernel {}x{} with pads",
               node.name, shape_str(x), w[2], w[3]);
  const int64_t o = w[0];
  if (in.size() > 2 && in[2].present) {
    expect_rank(node, in[2], 2, 1);
    expect_dtype(node, in[2], 2, DType::kF32);
    expect_dim(node, in[2], 2, 0, o);
  }
  const Shape y = {x[0], o, ho, wo};
  if (in.size() > 3 && in[3].present) {
    expect_dtype(node, in[3], 3, DType::kF32);
    SAMPAN_CHECK(in[3].shape == y, ErrorCode::kInvalidArgument,
                 "node '{}' (conv2d): input 3 (residual) is {}, expected the output's {}",
                 node.name, shape_str(in[3].shape), shape_str(y));
  }
  return {{y, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Conv2dAttrs& a = ctx.attrs_as<Conv2dAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& w = ctx.inputs[1];
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal, "node '{}' (conv2d): output not contiguous",
               ctx.node.name);
  Tensor hx, hw, hb, hr;
  const float* bias = conv_input_given(ctx, 2) ? contiguous_data(ctx.inputs[2], hb) : nullptr;
  const float* residual = conv_input_given(ctx, 3) ? contiguous_data(ctx.inputs[3], hr) : nullptr;
  const cpu::ConvShape s = conv_shape(a, x.shape(), w.shape());
  if (a.bf16) {
    const Tensor wc = w.is_contiguous() ? w : w.contiguous();
    cpu::conv2d_bf16(s, contiguous_data(x, hx), wc.data<uint16_t>(), bias, residual, a.epilogue,
                     y.data<float>(), ctx.runner);
    return;
  }
  cpu::conv2d(s, contiguous_data(x, hx), contiguous_data(w, hw), bias, residual, a.epilogue,
              y.data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<Conv2dAttrs>({.name = "conv2d", .min_inputs = 2,
                                                  .max_inputs = 4},
                                                 {{"strides", AttrType::kInts, false},
                                                  {"pads", AttrType::kInts, false},
                                                  {"dilations", AttrType::kInts, false},
                                                  {"group", AttrType::kInt, false},
                                                  {"activation", AttrType::kString, false},
                                                  {"act_min", AttrType::kFloat, false},
                                                  {"act_max", AttrType::kFloat, false},
                                                  {"precision", AttrType::kString, false}},
                                                 parse_conv2d_attrs, infer));
const RegisterKernel kCpu("conv2d", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
