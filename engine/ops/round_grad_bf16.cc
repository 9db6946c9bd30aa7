// round_grad_bf16(x [any] f32) -> x. A view op (the output is x itself, no copy): the identity in
// the forward pass whose gradient rule rounds the incoming gradient to bf16
// (train/grad_elementwise.cc). bf16 training puts it on the output of every projection GEMM
// (train/train_graph.h), so the backward GEMMs get bf16 output gradients while every forward sum
// stays f32. (It was round_bf16 with a grad_only attribute, which copied x: ~2.6 % of a bf16
// LoRA step on the TinyLlama shape went to those copies.)
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kF32);
  return {{in[0].shape, in[0].dtype, true, in[0].value}};
}

std::vector<Tensor> view(const graph::Node&, const OpAttrs*, const std::vector<Tensor>& in) {
  return {in[0]};
}

const RegisterOp kSchema({.name = "round_grad_bf16", .min_inputs = 1, .max_inputs = 1,
                          .infer = infer, .view = view});

}  // namespace
}  // namespace sampan::ops
