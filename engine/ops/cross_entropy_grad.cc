// cross_entropy_grad(logits [N, V], targets [N] i32, dloss [1] f32[, lse [N, 2] f32]) ->
// dlogits [N, V]: dloss · (softmax(logits) - onehot(target)) per row, 0 on ignored rows. lse:
// cross_entropy's second output for the same logits (each row's logsumexp, then not computed
// again). Attribute ignore_index as cross_entropy's.
#include "engine/core/error.h"
#include "engine/ops/cross_entropy.h"
#include "kernels/cpu/cross_entropy_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const CrossEntropyAttrs&,
                              const std::vector<TensorDesc>& in) {
  check_cross_entropy_inputs(node, in);
  expect_dtype(node, in[2], 2, DType::kF32);
  SAMPAN_CHECK(shape_numel(in[2].shape) == 1, ErrorCode::kInvalidArgument,
               "node '{}' ({}): dloss is {}, expected one element", node.name, node.op,
               shape_str(in[2].shape));
  if (in.size() > 3) {
    expect_rank(node, in[3], 3, 2);
    expect_dtype(node, in[3], 3, DType::kF32);
    expect_dim(node, in[3], 3, 0, in[0].shape[0]);
    expect_dim(node, in[3], 3, 1, 2);
  }
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const int32_t ignore = ctx.attrs_as<CrossEntropyAttrs>().ignore_index;
  check_targets(ctx, ignore);
  const Tensor& l = ctx.inputs[0];
  const Tensor& d = ctx.outputs[0];
  const double dloss = ctx.inputs[2].contiguous().data<float>()[0];
  Tensor lse;  // [N, 2], dense
  if (ctx.inputs.size() > 3) lse = ctx.inputs[3].contiguous();
  cpu::cross_entropy_backward<float>(l.dim(0), l.dim(1), l.data<float>(), row_stride(l),
                                     ctx.inputs[1].data<int32_t>(), ignore, dloss, d.data<float>(),
                                     row_stride(d), ctx.runner,
                                     lse.defined() ? lse.data<float>() : nullptr);
}

const RegisterOp kSchema(with_attrs<CrossEntropyAttrs>(
    {.name = "cross_entropy_grad", .min_inputs = 3, .max_inputs = 4},
    {{"ignore_index", AttrType::kInt, false}}, parse_cross_entropy_attrs, infer));
const RegisterKernel kCpu("cross_entropy_grad", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
