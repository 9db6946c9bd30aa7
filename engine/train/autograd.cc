#include "engine/train/autograd.h"

#include <functional>
#include <map>

#include "engine/core/error.h"

namespace sampan::train {
namespace {

std::map<std::string, GradRule>& rules() {
  static std::map<std::string, GradRule> r;
  return r;
}

}  // namespace

std::vector<ValueId> GradContext::add(const std::string& op, const std::string& suffix,
                                      std::vector<ValueId> inputs, graph::Attributes attrs,
                                      int n_outputs) {
  return graph.add_node(op, "grad." + node.name + "." + suffix, std::move(inputs), std::move(attrs),
                        n_outputs);
}

void GradContext::unsupported(const std::string& what) const {
  fail(ErrorCode::kUnsupported, "node '{}' ({}): {}", node.name, node.op, what);
}

void register_grad_rule(const std::string& op, GradRule rule) { rules()[op] = std::move(rule); }

bool has_grad_rule(const std::string& op) { return rules().count(op) != 0; }

std::vector<ValueId> build_backward(Graph& g, ValueId loss, const std::vector<ValueId>& wrt,
                                    const BackwardOptions& options) {
  const size_t n_values = g.n_values();
  const size_t n_forward = g.nodes().size();
  // Values that depend on a wrt value (forward sweep)...
  std::vector<bool> from_wrt(n_values, false);
  for (ValueId v : wrt) from_wrt.at(static_cast<size_t>(v)) = true;
  for (size_t n = 0; n < n_forward; ++n) {
    const graph::Node& node = g.nodes()[n];
    if (node.dead) continue;
    bool any = false;
    for (ValueId in : node.inputs)
      any = any || (in != graph::kNoValue && from_wrt[static_cast<size_t>(in)]);
    if (any) {
      for (ValueId out : node.outputs) from_wrt[static_cast<size_t>(out)] = true;
    }
  }
  // ...and values the loss depends on (backward sweep); a node needs a rule only if both hold.
  std::vector<bool> to_loss(n_values, false);
  to_loss.at(static_cast<size_t>(loss)) = true;
  for (size_t n = n_forward; n-- > 0;) {
    const graph::Node& node = g.nodes()[n];
    if (node.dead) continue;
    bool any = false;
    for (ValueId out : node.outputs) any = any || to_loss[static_cast<size_t>(out)];
    if (!any) continue;
    for (ValueId in : node.inputs) {
      if (in != graph::kNoValue) to_loss[static_cast<size_t>(in)] = true;
    }
  }
  for (ValueId v : wrt) {
    SAMPAN_CHECK(to_loss[static_cast<size_t>(v)], ErrorCode::kInvalidArgument,
                 "build_backward: the loss '{}' does not depend on '{}'", g.value(loss).name,
                 g.value(v).name);
  }

  // Recompute segments: by forward node, its segment or -1; by forward value, its copy.
  std::vector<int> segment(n_forward, -1);
  for (size_t i = 0; i < options.recompute.size(); ++i) {
    const auto [begin, end] = options.recompute[i];
    SAMPAN_CHECK(begin <= end && end <= n_forward, ErrorCode::kInvalidArgument,
                 "build_backward: recompute range [{}, {}) outside the {} forward nodes", begin,
                 end, n_forward);
    for (size_t n = begin; n < end; ++n) segment[n] = static_cast<int>(i);
  }
  // A segment's outputs that later forward nodes read (the next segment's checkpoint) stay
  // alive anyway: rules read them as they are, never a copy.
  std::vector<bool> boundary(n_values, false);
  for (ValueId v : g.outputs()) boundary[static_cast<size_t>(v)] = true;
  for (size_t n = 0; n < n_forward; ++n) {
    for (ValueId in : g.nodes()[n].inputs) {
      if (in == graph::kNoValue) continue;
      const graph::NodeId p = g.value(in).producer;
      if (p >= 0 && segment[static_cast<size_t>(p)] != segment[n]) {
        boundary[static_cast<size_t>(in)] = true;
      }
    }
  }
  std::vector<ValueId> copy_of(n_values, graph::kNoValue);
  // The value a rule reads in place of forward value v: v itself unless a recompute segment
  // produced it, else its copy (made on first use, its segment inputs first).
  std::function<ValueId(ValueId)> recomputed = [&](ValueId v) -> ValueId {
    if (v == graph::kNoValue || static_cast<size_t>(v) >= n_values) return v;
    const graph::NodeId p = g.value(v).producer;
    if (p < 0 || static_cast<size_t>(p) >= n_forward || segment[static_cast<size_t>(p)] < 0 ||
        boundary[static_cast<size_t>(v)]) {
      return v;
    }
    if (copy_of[static_cast<size_t>(v)] == graph::kNoValue) {
      const graph::Node node = g.nodes()[static_cast<size_t>(p)];
      std::vector<ValueId> inputs;
      for (ValueId in : node.inputs) inputs.push_back(recomputed(in));
      const std::vector<ValueId> outs =
          g.add_node(node.op, node.name + ".recompute", std::move(inputs), node.attrs,
                     static_cast<int>(node.outputs.size()));
      for (size_t k = 0; k < outs.size(); ++k) {
        copy_of[static_cast<size_t>(node.outputs[k])] = outs[k];
      }
    }
    return copy_of[static_cast<size_t>(v)];
  };

  std::vector<ValueId> grad(n_values, graph::kNoValue);
  grad[static_cast<size_t>(loss)] =
      g.add_constant("grad.seed", Tensor::from_f32({1}, std::vector<float>{1.0f}));
  int accumulations = 0;
  auto accumulate = [&](ValueId v, ValueId dv) {
    ValueId& slot = grad[static_cast<size_t>(v)];
    if (slot == graph::kNoValue) {
      slot = dv;
    } else {
      slot = g.add("add", "grad.acc." + g.value(v).name + "." + std::to_string(accumulations++),
                   {slot, dv});
    }
  };
  for (size_t n = n_forward; n-- > 0;) {
    if (g.nodes()[n].dead) continue;
    GradContext ctx{g, g.nodes()[n], {}, {}, recomputed};
    bool flows = false;
    for (ValueId out : ctx.node.outputs) {
      ctx.output_grads.push_back(grad[static_cast<size_t>(out)]);
      flows = flows || grad[static_cast<size_t>(out)] != graph::kNoValue;
    }
    bool wanted = false;
    for (ValueId in : ctx.node.inputs) {
      const bool need = in != graph::kNoValue && from_wrt[static_cast<size_t>(in)] &&
                        to_loss[static_cast<size_t>(in)];
      ctx.needs_grad.push_back(need);
      wanted = wanted || need;
    }
    if (!flows || !wanted) continue;
    const auto it = rules().find(ctx.node.op);
    SAMPAN_CHECK(it != rules().end(), ErrorCode::kUnsupported,
                 "node '{}' ({}): no gradient rule for op '{}'", ctx.node.name, ctx.node.op,
                 ctx.node.op);
    const std::vector<ValueId>& inputs = ctx.node.inputs;
    const std::vector<ValueId> in_grads = it->second(ctx);
    SAMPAN_CHECK(in_grads.size() == inputs.size(), ErrorCode::kInternal,
                 "node '{}' ({}): gradient rule returned {} gradients for {} inputs", ctx.node.name,
                 ctx.node.op, in_grads.size(), ctx.node.inputs.size());
    for (size_t i = 0; i < in_grads.size(); ++i) {
      if (!ctx.needs_grad[i]) continue;
      SAMPAN_CHECK(in_grads[i] != graph::kNoValue, ErrorCode::kInternal,
                   "node '{}' ({}): gradient rule gave no gradient for input {}", ctx.node.name,
                   ctx.node.op, i);
      accumulate(inputs[i], in_grads[i]);
    }
  }
  std::vector<ValueId> out;
  for (ValueId v : wrt) {
    const ValueId d = grad[static_cast<size_t>(v)];
    SAMPAN_CHECK(d != graph::kNoValue, ErrorCode::kInternal,
                 "build_backward: no gradient reached '{}'", g.value(v).name);
    g.mark_output(d);
    out.push_back(d);
  }
  return out;
}

}  // namespace sampan::train
