// Reverse-mode differentiation over the graph IR (ggml's build_backward_expand, in our IR).
//
// build_backward() appends the backward of a scalar loss to the SAME graph, as ordinary nodes
// made by one registered gradient rule per forward op, and marks the requested gradients as
// graph outputs. There is no tape: the executor plans the backward like the forward, so each
// activation the backward reads lives until its last backward reader and is freed (its arena
// range reused) right after it, and activations no rule reads are freed during the forward.
//
// Only what is needed is built: a node gets backward nodes only if it lies on a path from one of
// the `wrt` values to the loss, and a rule is asked only for the inputs on such a path. So the
// gradients of frozen weights (constants) and of everything upstream of the first trained value
// are never computed.
//
// Recomputation (activation checkpointing): a segment of forward nodes may be marked for
// recompute. Its rules then read copies of the segment's nodes ("<name>.recompute"), appended
// right before the segment's first backward node and made only for the values those rules read,
// so the segment's own activations die at their last forward reader and the backward holds one
// segment's activations at a time. Values entering the segment (the checkpoints) are kept. The
// copies compute exactly what the originals did (the ops are deterministic; dropout regenerates
// its mask from its seed), so gradients do not change by a bit. Copies nobody reads are left
// //
// Rules live next to their kind of op (engine/train/grad_*.cc) and register themselves
// statically, like ops. A rule builds nodes with GradContext::add; an op without a rule on a
// needed path is Error(kUnsupported) naming the node and op.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/graph/graph.h"

namespace sampan::train {

using graph::Graph;
using graph::ValueId;

// What a rule sees for one forward node.
struct GradContext {
  Graph& graph;
  graph::Node node;                   // a copy: appending nodes may move the graph's nodes
  std::vector<ValueId> output_grads;  // by output: dL/d(output), or kNoValue (none flows)
  std::vector<bool> needs_grad;       // by input: whether the rule must return its gradient
  // Forward values as a backward node must read them (a recomputed copy in a recompute
  // segment, see above); rules read node inputs and outputs only through input() / output().
  std::function<ValueId(ValueId)> recomputed;

  ValueId input(size_t i) { return recomputed(node.inputs.at(i)); }
  ValueId output(size_t i) { return recomputed(node.outputs.at(i)); }

  // Appends a backward node named "grad.<forward node>.<suffix>"; returns its outputs.
  std::vector<ValueId> add(const std::string& op, const std::string& suffix,
                           std::vector<ValueId> inputs, graph::Attributes attrs = {},
                           int n_outputs = 1);
  ValueId add1(const std::string& op, const std::string& suffix, std::vector<ValueId> inputs,
               graph::Attributes attrs = {}) {
    return add(op, suffix, std::move(inputs), std::move(attrs), 1)[0];
  }
  // Throws Error(kUnsupported) "node 'n' (op): <what>" for a case the rule does not cover.
  [[noreturn]] void unsupported(const std::string& what) const;
};

// Returns one gradient per forward input (kNoValue where !needs_grad); each has the shape and
// dtype of its input.
using GradRule = std::function<std::vector<ValueId>(GradContext& ctx)>;

void register_grad_rule(const std::string& op, GradRule rule);
bool has_grad_rule(const std::string& op);

struct RegisterGradRule {
  RegisterGradRule(const std::string& op, GradRule rule) {
    register_grad_rule(op, std::move(rule));
  }
};

struct BackwardOptions {
  // Half-open ranges [begin, end) of forward node indices whose activations are recomputed.
  std::vector<std::pair<size_t, size_t>> recompute;
};

// Appends the backward of `loss` (a one-element f32 value, seeded with dL/dL = 1) and returns
// dL/d(wrt[i]) for each i, each marked as a graph output (after the existing outputs, in order).
// Gradients reaching a value along several paths are summed with `add` nodes in a fixed order.
// A wrt value the loss does not depend on is Error(kInvalidArgument) naming it.
std::vector<ValueId> build_backward(Graph& g, ValueId loss, const std::vector<ValueId>& wrt,
                                    const BackwardOptions& options = {});

}  // namespace sampan::train
