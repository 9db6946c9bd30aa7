// conv2d_nchwc(x [N, C/B, H, W, B] blocked, or [N, C, H, W] plain (a stem conv on few channels),
//              w [O/B, C/B, kh, kw, B, B] (blocked x) or [O/B, C, kh, kw, 1, B] (plain x),
//              bias [O/B * B] (opt), residual [N, O/B, Ho, Wo, B] (opt))
//   -> y [N, O/B, Ho, Wo, B] = act(conv(x, w) + bias + residual)
// (C/B, O/B rounded up: channels past C or O are padding, see kernels/cpu/conv_nchwc_cpu.h.)
// Weight element [ob, cb, ky, kx, i, o] is conv2d's w[ob·B + o, cb·B + i, ky, kx] (zero for a
// padded channel); the layout pass reorders the weights once, as a constant. A bf16 weight
// [O/B, C/B, kh, kw, B/2, B, 2] (blocked x, B = 16, where cpu::nchwc_bf16_runs) holds element
// [ob, cb, ky, kx, p, o, j] = w[ob·B + o, cb·B + 2p + j, ky, kx]: the conv then rounds x to bf16
// and sums exact products in f32 (cpu::conv2d_nchwc_bf16). With plain x the bf16 weight pairs
// kernel columns, [O/B, C, kh, kw/2, 1, B, 2] = w[ob·B + o, c, ky, 2q + j] (kw even: the layout
// pass pads an odd kernel with a zero column and one more right pad; dilation along w 1).
// Attributes are conv2d's (strides, pads, dilations, activation, act_min, act_max, precision:
// the weight's dtype decides); group must be 1.
#include "engine/ops/conv2d_nchwc.h"

#include "engine/core/error.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/conv_nchwc_cpu.h"

namespace sampan::ops {

int64_t nchwc_block() { return cpu::nchwc_preferred_block(); }

bool nchwc_bf16_runs() { return cpu::nchwc_bf16_runs(); }

namespace {

Conv2dAttrs parse(const graph::Node& node) {
  Conv2dAttrs a = parse_conv2d_attrs(node);
  SAMPAN_CHECK(a.group == 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_nchwc): group = {}, only 1 is supported", node.name, a.group);
  return a;
}

// x: [N, C/B, H, W, B] or [N, C, H, W]; w: [O/B, C/B or C, kh, kw, b_in, B] or (bf16)
// [O/B, C/B, kh, kw, B/2, B, 2] or (bf16, plain x) [O/B, C, kh, kw/2, 1, B, 2].
cpu::NchwcConvShape conv_shape(const Conv2dAttrs& a, const Shape& x, const Shape& w) {
  const bool bf16 = w.size() == 7, plain = x.size() == 4;
  cpu::NchwcConvShape s;
  s.n = x[0];
  s.in_blocks = x[1];
  s.h = x[2];
  s.w = x[3];
  s.b_in = bf16 ? (plain ? 1 : w[4] * w[6]) : w[4];
  s.out_blocks = w[0];
  s.block = w[5];
  s.kh = w[2];
  s.kw = bf16 && plain ? 2 * w[3] : w[3];
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
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  expect_dtype(node, in[0], 0, DType::kF32);
  const bool bf16 = in[1].dtype == DType::kBF16;
  if (!bf16) expect_dtype(node, in[1], 1, DType::kF32);
  expect_rank(node, in[1], 1, bf16 ? 7 : 6);
  const bool plain = x.size() == 4;
  if (!plain) expect_rank(node, in[0], 0, 5);
  const int64_t block = w[5];
  SAMPAN_CHECK(bf16 ? block == 16 : block == 8 || block == 16, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_nchwc): weight {} has block {}, expected {}", node.name,
               shape_str(w), block, bf16 ? "16" : "8 or 16");
  SAMPAN_CHECK(!bf16 || (w[4] == (plain ? 1 : block / 2) && w[6] == 2),
               ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_nchwc): bf16 weight {} is not in pairs [.., {}, {}, 2]",
               node.name, shape_str(w), plain ? 1 : block / 2, block);
  SAMPAN_CHECK(!(bf16 && plain) || a.dilations[1] == 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_nchwc): a bf16 weight in kernel-column pairs needs dilation 1 "
               "along w, not {}",
               node.name, a.dilations[1]);
  const int64_t b_in = bf16 ? (plain ? 1 : w[4] * w[6]) : w[4];
  SAMPAN_CHECK(b_in == (plain ? 1 : block) && (plain || x[4] == block) && w[1] == x[1],
               ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_nchwc): weight {} does not fit the input {}", node.name,
               shape_str(w), shape_str(x));
  SAMPAN_CHECK(w[0] >= 1 && w[2] >= 1 && w[3] >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_nchwc): empty weight {}", node.name, shape_str(w));
  const cpu::NchwcConvShape s = conv_shape(a, x, w);
  const int64_t ho = s.out_h();
  const int64_t wo = s.out_w();
  SAMPAN_CHECK(ho >= 1 && wo >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (conv2d_nchwc): input {} is smaller than the dilated kernel {}x{} "
               "with pads",
               node.name, shape_str(x), w[2], w[3]);
  if (in.size() > 2 && in[2].present) {
    expect_rank(node, in[2], 2, 1);
    expect_dtype(node, in[2], 2, DType::kF32);
    expect_dim(node, in[2], 2, 0, w[0] * block);
  }
  const Shape y = {x[0], w[0], ho, wo, block};
  if (in.size() > 3 && in[3].present) {
    expect_dtype(node, in[3], 3, DType::kF32);
    SAMPAN_CHECK(in[3].shape == y, ErrorCode::kInvalidArgument,
                 "node '{}' (conv2d_nchwc): input 3 (residual) is {}, expected the output's {}",
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
               "node '{}' (conv2d_nchwc): output not contiguous", ctx.node.name);
  Tensor hx, hw, hb, hr;
  const float* bias = conv_input_given(ctx, 2) ? contiguous_data(ctx.inputs[2], hb) : nullptr;
  const float* residual = conv_input_given(ctx, 3) ? contiguous_data(ctx.inputs[3], hr) : nullptr;
  const cpu::NchwcConvShape s = conv_shape(a, x.shape(), w.shape());
  if (w.dtype() == DType::kBF16) {
    SAMPAN_CHECK(cpu::nchwc_bf16_runs(/*force=*/true), ErrorCode::kUnsupported,
                 "node '{}' (conv2d_nchwc): a bf16 weight needs AVX512-BF16, which this CPU "
                 "(or SAMPAN_CPU_ISA) lacks",
                 ctx.node.name);
    const Tensor wc = w.contiguous();
    cpu::conv2d_nchwc_bf16(s, contiguous_data(x, hx), wc.data<uint16_t>(), bias, residual,
                           a.epilogue, y.data<float>(), ctx.runner);
    return;
  }
  cpu::conv2d_nchwc(s, contiguous_data(x, hx), contiguous_data(w, hw), bias, residual,
                    a.epilogue, y.data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<Conv2dAttrs>({.name = "conv2d_nchwc", .min_inputs = 2,
                                                  .max_inputs = 4},
                                                 {{"strides", AttrType::kInts, false},
                                                  {"pads", AttrType::kInts, false},
                                                  {"dilations", AttrType::kInts, false},
                                                  {"group", AttrType::kInt, false},
                                                  {"activation", AttrType::kString, false},
                                                  {"act_min", AttrType::kFloat, false},
                                                  {"act_max", AttrType::kFloat, false},
                                                  {"precision", AttrType::kString, false}},
                                                 parse, infer));
const RegisterKernel kCpu("conv2d_nchwc", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
