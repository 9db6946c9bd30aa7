// Gradient rules of the attention path: causal_attention (training form) and rope.
#include "engine/train/autograd.h"

namespace sampan::train {
namespace {

using graph::kNoValue;

// causal_attention(q, k, v, lengths) -> o, lse. Only o carries a gradient (lse is saved for the
// backward); causal_attention_grad recomputes the probabilities from q, k and lse.
std::vector<ValueId> attention_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  if (ctx.output_grads[1] != kNoValue) ctx.unsupported("no gradient through the log-sum-exp");
  const std::vector<ValueId> d = ctx.add("causal_attention_grad", "dqkv",
                                         {ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3),
                                          ctx.output(0), ctx.output(1), ctx.output_grads[0]},
                                         n.attrs, 3);
  return {ctx.needs_grad[0] ? d[0] : kNoValue, ctx.needs_grad[1] ? d[1] : kNoValue,
          ctx.needs_grad[2] ? d[2] : kNoValue, kNoValue};
}

// rope(x, positions, inv_freq): dx = the transposed rotation of dy. inv_freq is fixed.
std::vector<ValueId> rope_rule(GradContext& ctx) {
  const graph::Node& n = ctx.node;
  if (ctx.needs_grad[2]) ctx.unsupported("no gradient for inv_freq");
  return {ctx.add1("rope_grad", "dx", {ctx.output_grads[0], ctx.input(1), ctx.input(2)}, n.attrs),
          kNoValue, kNoValue};
}

const RegisterGradRule kAttention("causal_attention", attention_rule);
const RegisterGradRule kRope("rope", rope_rule);

}  // namespace
}  // namespace sampan::train
