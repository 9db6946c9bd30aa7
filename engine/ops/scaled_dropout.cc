// scaled_dropout(x [rows, cols] f32, seed [2] i32) -> y = x ⊙ keep / (1 - p) · scale
// Attributes p (drop probability in [0, 1)), scale (default 1), salt (int, default 0). The mask
// is a pure function of (seed, salt, element index) (kernels/cpu/dropout_cpu.h), so the same
// op applied to dy is its own gradient rule and nothing is stored between forward and backward.
// seed holds the low and high 32 bits of a 64-bit seed, so a caller can change it per step
// without rebuilding the graph.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/dropout_cpu.h"

namespace sampan::ops {
namespace {

struct DropoutAttrs final : OpAttrs {
  double p = 0;
  double scale = 1;
  uint64_t salt = 0;
};

DropoutAttrs parse(const graph::Node& node) {
  DropoutAttrs a;
  a.p = node.attrs.get_float("p");
  a.scale = node.attrs.get_float("scale", 1.0);
  a.salt = static_cast<uint64_t>(node.attrs.get_int("salt", 0));
  SAMPAN_CHECK(a.p >= 0 && a.p < 1, ErrorCode::kInvalidArgument,
               "node '{}' (scaled_dropout): p = {} outside [0, 1)", node.name, a.p);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const DropoutAttrs&,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 1);
  expect_dtype(node, in[1], 1, DType::kI32);
  expect_dim(node, in[1], 1, 0, 2);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<DropoutAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  const Tensor s = ctx.inputs[1].contiguous();
  const auto* w = s.data<uint32_t>();
  const uint64_t seed = (uint64_t{w[1]} << 32 | w[0]) ^ (a.salt * 0xD1B54A32D192ED03ull);
  cpu::scaled_dropout<float>(x.dim(0), x.dim(1), x.data<float>(), row_stride(x), seed, a.p, a.scale,
                             y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema(with_attrs<DropoutAttrs>(
    {.name = "scaled_dropout", .min_inputs = 2, .max_inputs = 2},
    {{"p", AttrType::kFloat}, {"scale", AttrType::kFloat, false}, {"salt", AttrType::kInt, false}},
    parse, infer));
const RegisterKernel kCpu("scaled_dropout", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
