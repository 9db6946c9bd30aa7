// Graph rewrites for CNNs (conv2d, batch_norm, binary add, unary activations). Like the passes
// of passes.h, each is a pure function of the graph returning how many rewrites it made; run
// them in this order: fold_conv_batch_norm, fuse_conv_residual, fuse_conv_activation (so that
// conv -> batch_norm -> add -> relu, a ResNet block's tail, becomes one conv2d).
#pragma once

#include "engine/graph/graph.h"

namespace sampan::graph::passes {

// conv2d(x, w, b?) -> batch_norm(scale, bias, mean, var) with every parameter a graph constant
// (f32) and the conv's output read by nothing else (no residual, no activation yet) -> one
// conv2d with new constants w' = w * s, b' = (b - mean) * s + bias, s = scale / sqrt(var + eps).
// The original constants are left alone (another node may share them).
int fold_conv_batch_norm(Graph& graph);

// conv2d(x, w, b?) -> binary{kind=add}(conv, r) (either operand order), the conv's output read
// by the add alone and the conv without residual or activation -> conv2d(x, w, b?, r) in the
// add's place (so r, which may be produced after the conv, is defined before it). Only when r
// provably has the conv output's shape: the pass infers every shape of the graph (op schemas)
// under two different bindings of the symbolic input dimensions and requires equal shapes under
// both; a graph whose inference fails there is left alone, and so is a constant r (its add is
// a broadcast bias in practice).
int fuse_conv_residual(Graph& graph);

// conv2d -> unary{kind=relu|clip|sigmoid|hard_swish}, the conv's output read by the unary alone,
// not a graph output, and the conv without an activation -> conv2d with activation = kind
// (clip's min/max become act_min/act_max).
int fuse_conv_activation(Graph& graph);

}  // namespace sampan::graph::passes
