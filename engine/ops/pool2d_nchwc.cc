// pool2d_nchwc(x [N, C/B, H, W, B] f32 blocked) -> y [N, C/B, Ho, Wo, B]: pool2d (pool2d.cc) on
// the blocked layout of the blocked conv (kernels/cpu/conv_nchwc_cpu.h), with pool2d's
// attributes and output size (max and avg, pads, strides, dilations, ceil_mode,
// count_include_pad, global). Padded channels pool like the others and stay don't-care.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/pool2d.h"
#include "kernels/cpu/conv_nchwc_cpu.h"

namespace sampan::ops {
namespace {

// x: [N, C/B, H, W, B]; the shape's c counts the padded channels (C/B * B).
cpu::PoolShape pool_shape(const Pool2dAttrs& a, const Shape& x) {
  return ops::pool_shape(a, x[0], x[1] * x[4], x[2], x[3]);
}

std::vector<TensorDesc> infer(const graph::Node& node, const Pool2dAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 5);
  expect_dtype(node, in[0], 0, DType::kF32);
  const Shape& x = in[0].shape;
  SAMPAN_CHECK(x[4] == 8 || x[4] == 16, ErrorCode::kInvalidArgument,
               "node '{}' (pool2d_nchwc): input {} has block {}, expected 8 or 16", node.name,
               shape_str(x), x[4]);
  const cpu::PoolShape s = pool_shape(a, x);
  SAMPAN_CHECK(s.ho >= 1 && s.wo >= 1 && s.h >= 1 && s.w >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (pool2d_nchwc): input {} is smaller than the window {}x{} with pads",
               node.name, shape_str(x), s.kh, s.kw);
  return {{{x[0], x[1], s.ho, s.wo, x[4]}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor x = ctx.inputs[0].contiguous();
  cpu::pool2d_nchwc(pool_shape(ctx.attrs_as<Pool2dAttrs>(), x.shape()), x.dim(4),
                    x.data<float>(), ctx.outputs[0].data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<Pool2dAttrs>({.name = "pool2d_nchwc", .min_inputs = 1,
                                                  .max_inputs = 1},
                                                 {{"kind", AttrType::kString},
                                                  {"kernel", AttrType::kInts, false},
                                                  {"strides", AttrType::kInts, false},
                                                  {"pads", AttrType::kInts, false},
                                                  {"dilations", AttrType::kInts, false},
                                                  {"ceil_mode", AttrType::kInt, false},
                                                  {"count_include_pad", AttrType::kInt, false},
                                                  {"global", AttrType::kInt, false}},
                                                 parse_pool2d_attrs, infer));
const RegisterKernel kCpu("pool2d_nchwc", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
