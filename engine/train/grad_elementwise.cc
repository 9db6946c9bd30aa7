// Gradient rules of the row-wise ops: add, rms_norm, silu_mul, scaled_dropout, hadamard,
// round_bf16, round_grad_bf16 and the cross-entropy loss.
#include "engine/train/autograd.h"

namespace sampan::train {
namespace {

using graph::kNoValue;

// add(a, b): both get dy.
std::vector<ValueId> add_rule(GradContext& ctx) {
  const ValueId dy = ctx.output_grads[0];
  return {ctx.needs_grad[0] ? dy : kNoValue, ctx.needs_grad[1] ? dy : kNoValue};
}

// rms_norm(x, w): rms_norm_grad computes dw only when w is trained.
std::vector<ValueId> rms_norm_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  graph::Attributes a = n.attrs;
  a.set("weight_grad", int64_t{ctx.needs_grad[1] ? 1 : 0});
  const std::vector<ValueId> d =
      ctx.add("rms_norm_grad", "dx", {ctx.input(0), ctx.input(1), ctx.output_grads[0]}, a, 2);
  return {ctx.needs_grad[0] ? d[0] : kNoValue, ctx.needs_grad[1] ? d[1] : kNoValue};
}

// silu_mul(g, u).
std::vector<ValueId> silu_mul_rule(GradContext& ctx) {
  const std::vector<ValueId> d =
      ctx.add("silu_mul_grad", "dgu", {ctx.input(0), ctx.input(1), ctx.output_grads[0]}, {}, 2);
  return {ctx.needs_grad[0] ? d[0] : kNoValue, ctx.needs_grad[1] ? d[1] : kNoValue};
}

// scaled_dropout(x, seed) is linear in x with a diagonal matrix: the same op (same seed, salt,
// p and scale) applied to dy regenerates the mask.
std::vector<ValueId> dropout_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  if (ctx.needs_grad[1]) ctx.unsupported("no gradient for the seed");
  return {ctx.add1("scaled_dropout", "dx", {ctx.output_grads[0], ctx.input(1)}, n.attrs), kNoValue};
}

// hadamard(x): the normalised Walsh-Hadamard matrix is symmetric and orthogonal, so it is its
// own transpose.
std::vector<ValueId> hadamard_rule(GradContext& ctx) {
  return {ctx.add1("hadamard", "dx", {ctx.output_grads[0]}, ctx.node.attrs)};
}

// cross_entropy(logits, targets) -> summed loss, row logsumexps (reused by the gradient).
std::vector<ValueId> cross_entropy_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  if (ctx.output_grads.size() > 1 && ctx.output_grads[1] != kNoValue) {
    ctx.unsupported("no gradient through the row logsumexps");
  }
  return {ctx.add1("cross_entropy_grad", "dlogits",
                   {ctx.input(0), ctx.input(1), ctx.output_grads[0], ctx.output(1)}, n.attrs),
          kNoValue};
}

// round_bf16(x) and round_grad_bf16(x) (the identity): straight through, with the gradient
// rounded to bf16, so the backward GEMMs get bf16 operands too.
std::vector<ValueId> round_bf16_rule(GradContext& ctx) {
  return {ctx.add1("round_bf16", "dx", {ctx.output_grads[0]})};
}

const RegisterGradRule kAdd("add", add_rule);
const RegisterGradRule kRoundBf16("round_bf16", round_bf16_rule);
const RegisterGradRule kRoundGradBf16("round_grad_bf16", round_bf16_rule);
const RegisterGradRule kRmsNorm("rms_norm", rms_norm_rule);
const RegisterGradRule kSiluMul("silu_mul", silu_mul_rule);
const RegisterGradRule kDropout("scaled_dropout", dropout_rule);
const RegisterGradRule kHadamard("hadamard", hadamard_rule);
const RegisterGradRule kCrossEntropy("cross_entropy", cross_entropy_rule);

}  // namespace
}  // namespace sampan::train
