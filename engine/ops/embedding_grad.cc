// embedding_grad(ids [n] i32, dy [n, dim] f32) -> dtable [vocab, dim] f32 (attribute vocab):
// the scatter-add of dy's rows onto the looked-up rows (kernels/cpu/embedding_grad_cpu.h).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/embedding_grad_cpu.h"

namespace sampan::ops {
namespace {

struct EmbeddingGradAttrs final : OpAttrs {
  int64_t vocab = 0;
};

EmbeddingGradAttrs parse(const graph::Node& node) {
  EmbeddingGradAttrs a;
  a.vocab = node.attrs.get_int("vocab");
  SAMPAN_CHECK(a.vocab > 0, ErrorCode::kInvalidArgument,
               "node '{}' (embedding_grad): vocab {} must be positive", node.name, a.vocab);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const EmbeddingGradAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 1);
  expect_dtype(node, in[0], 0, DType::kI32);
  expect_rank(node, in[1], 1, 2);
  expect_dtype(node, in[1], 1, DType::kF32);
  expect_dim(node, in[1], 1, 0, in[0].shape[0]);
  return {{{a.vocab, in[1].shape[1]}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const int64_t vocab = ctx.attrs_as<EmbeddingGradAttrs>().vocab;
  const Tensor& ids = ctx.inputs[0];
  const Tensor& dy = ctx.inputs[1];
  const int32_t* id = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.dim(0); ++i) {
    SAMPAN_CHECK(id[i] >= 0 && id[i] < vocab, ErrorCode::kInvalidArgument,
                 "node '{}' (embedding_grad): token id {} at position {} is outside [0, {})",
                 ctx.node.name, id[i], i, vocab);
  }
  cpu::embedding_backward<float>(ids.dim(0), id, dy.data<float>(), row_stride(dy), vocab, dy.dim(1),
                                 ctx.outputs[0].data<float>());
}

const RegisterOp kSchema(
    with_attrs<EmbeddingGradAttrs>({.name = "embedding_grad", .min_inputs = 2, .max_inputs = 2},
                                   {{"vocab", AttrType::kInt}}, parse, infer));
const RegisterKernel kCpu("embedding_grad", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
