// Gradient rules of the matrix ops: linear (frozen weights of any format, or trained f32
// weights such as LoRA's A and B), linear_cross_entropy (the LM head with its loss) and
// embedding.
#include "engine/core/error.h"
#include "engine/train/autograd.h"

namespace sampan::train {
namespace {

using graph::kNoValue;

// linear(x, w_0.., bias.., scales.., zeros..) -> y = x · Wᵀ + bias (engine/ops/linear.cc).
//   dx = dy · W                 linear_grad_input over the same weight slots (any format)
//   dW = dyᵀ · x                linear_grad_weight (single-block f32 weights)
std::vector<ValueId> linear_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  const ValueId dy = ctx.output_grads[0];
  if (n.attrs.get_string("epilogue", "store") != "store") {
    ctx.unsupported("no gradient for the silu_mul epilogue (train on the unfused graph)");
  }
  const int64_t b = n.attrs.get_int("n_blocks", 1);
  std::vector<ValueId> grads(n.inputs.size(), kNoValue);
  if (ctx.needs_grad[0]) {
    std::vector<ValueId> in = {dy};
    for (size_t i = 1; i < n.inputs.size(); ++i) in.push_back(ctx.input(i));
    graph::Attributes a;
    a.set("n_blocks", b);
    if (n.attrs.has("group_size")) a.set("group_size", n.attrs.get_int("group_size"));
    if (n.attrs.has("ggml_type")) a.set("ggml_type", n.attrs.get_int("ggml_type"));
    grads[0] = ctx.add1("linear_grad_input", "dx", std::move(in), std::move(a));
  }
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (!ctx.needs_grad[i]) continue;
    if (static_cast<int64_t>(i) > b) ctx.unsupported("no gradient for a bias, scale or zero point");
    if (b != 1) ctx.unsupported("weight gradients of a multi-block (fused) linear");
    grads[i] = ctx.add1("linear_grad_weight", "dw", {dy, ctx.input(0)});
  }
  return grads;
}

// linear_cross_entropy(x, weight, bias, scales, zeros, targets) -> loss, dx, scratch
// (engine/ops/linear_cross_entropy.cc): with with_grad = 1 the op has already formed
// d(loss)/dx (its loss is a sum, so the gradient is linear in the loss's upstream gradient):
// dx times that upstream gradient, broadcast (a binary mul; in training it is the seed 1).
std::vector<ValueId> linear_cross_entropy_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  for (size_t o = 1; o < ctx.output_grads.size(); ++o) {
    if (ctx.output_grads[o] != kNoValue) ctx.unsupported("no gradient through dx or the scratch");
  }
  std::vector<ValueId> grads(n.inputs.size(), kNoValue);
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (ctx.needs_grad[i]) ctx.unsupported("gradient for x only (the weights are frozen)");
  }
  if (!ctx.needs_grad[0]) return grads;
  if (n.attrs.get_int("with_grad", 0) != 1) {
    ctx.unsupported("the node was built without with_grad = 1, so it forms no dx");
  }
  grads[0] = ctx.add1("binary", "dx", {ctx.output(1), ctx.output_grads[0]},
                      {{"kind", std::string("mul")}});
  return grads;
}

// embedding(ids, table) -> rows of table: dtable = scatter-add of dy (ids get none).
std::vector<ValueId> embedding_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  std::vector<ValueId> grads(2, kNoValue);
  if (!ctx.needs_grad[1]) return grads;
  const graph::Value& table = ctx.graph.value(n.inputs[1]);
  int64_t vocab = 0;
  if (table.kind == graph::ValueKind::kConstant) {
    vocab = table.constant.dim(0);
  } else if (!table.shape.empty() && !table.shape[0].symbolic()) {
    vocab = table.shape[0].size;
  } else {
    ctx.unsupported("the table's row count must be known when the graph is built");
  }
  if (table.dtype != DType::kF32) ctx.unsupported("gradient of a non-f32 embedding table");
  grads[1] =
      ctx.add1("embedding_grad", "dtable", {ctx.input(0), ctx.output_grads[0]}, {{"vocab", vocab}});
  return grads;
}

const RegisterGradRule kLinear("linear", linear_rule);
const RegisterGradRule kEmbedding("embedding", embedding_rule);
const RegisterGradRule kLinearCrossEntropy("linear_cross_entropy", linear_cross_entropy_rule);

}  // namespace
}  // namespace sampan::train
