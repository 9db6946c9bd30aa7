// cross_entropy(logits [N, V] f32, targets [N] i32) -> loss [1] f32, lse [N, 2] f32: the loss is
// the SUM over rows whose target is not ignore_index (attribute, default -100) of
// logsumexp(logits) - logits[target] (kernels/cpu/cross_entropy_cpu.h); lse holds each row's
// logsumexp as hi and lo floats for cross_entropy_grad, which then skips two of its three passes
// over the logits. A target outside [0, V) that is not ignore_index is an error naming the node
// and the row.
#include "engine/ops/cross_entropy.h"

#include "engine/core/error.h"
#include "kernels/cpu/cross_entropy_cpu.h"

namespace sampan::ops {

CrossEntropyAttrs parse_cross_entropy_attrs(const graph::Node& node) {
  CrossEntropyAttrs a;
  a.ignore_index = static_cast<int32_t>(node.attrs.get_int("ignore_index", -100));
  return a;
}

void check_cross_entropy_inputs(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_rank(node, in[1], 1, 1);
  expect_dtype(node, in[1], 1, DType::kI32);
  expect_dim(node, in[1], 1, 0, in[0].shape[0]);
}

void check_targets(const KernelContext& ctx, int32_t ignore) {
  check_targets(ctx, ctx.inputs[1], ctx.inputs[0].dim(1), ignore);
}

void check_targets(const KernelContext& ctx, const Tensor& t, int64_t vocab, int32_t ignore) {
  const int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.dim(0); ++i) {
    SAMPAN_CHECK(p[i] == ignore || (p[i] >= 0 && p[i] < vocab), ErrorCode::kInvalidArgument,
                 "node '{}' ({}): target {} of row {} is outside [0, {}) and not the ignore index "
                 "{}",
                 ctx.node.name, ctx.node.op, p[i], i, vocab, ignore);
  }
}

namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const CrossEntropyAttrs&,
                              const std::vector<TensorDesc>& in) {
  check_cross_entropy_inputs(node, in);
  return {{{1}, DType::kF32}, {{in[0].shape[0], 2}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const int32_t ignore = ctx.attrs_as<CrossEntropyAttrs>().ignore_index;
  check_targets(ctx, ignore);
  const Tensor& l = ctx.inputs[0];
  const double loss = cpu::cross_entropy_forward<float>(
      l.dim(0), l.dim(1), l.data<float>(), row_stride(l), ctx.inputs[1].data<int32_t>(), ignore,
      ctx.runner, ctx.outputs[1].data<float>());
  ctx.outputs[0].data<float>()[0] = static_cast<float>(loss);
}

const RegisterOp kSchema(with_attrs<CrossEntropyAttrs>(
    {.name = "cross_entropy", .min_inputs = 2, .max_inputs = 2, .n_outputs = 2},
    {{"ignore_index", AttrType::kInt, false}}, parse_cross_entropy_attrs, infer));
const RegisterKernel kCpu("cross_entropy", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
