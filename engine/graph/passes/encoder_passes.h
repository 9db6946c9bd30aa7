// Passes for imported transformer encoders (BERT-class), run after the matmul passes
// (matmul_passes.h): attention written out as matmul/softmax/transposes becomes one
// attention_nc node, and a residual add feeding a layer norm becomes one add_layer_norm.
// Each returns its rewrites.
#pragma once

#include "engine/graph/graph.h"

namespace sampan::graph::passes {

// The attention an ONNX export writes out (transformers' BERT, eager or SDPA):
//   q4 = transpose(reshape(q, [B, S, H, D]), [0, 2, 1, 3])             q, k, v: [B, S, H·D]
//   k4 = transpose(reshape(k, [B, S, H, D]), [0, 2, 3, 1])             (or two transposes)
//   v4 = transpose(reshape(v, [B, S, H, Dv]), [0, 2, 1, 3])
//   p  = softmax(matmul(q4, k4) [· c | / c] [+ mask], axis -1)
//   y  = reshape(transpose(matmul(p, v4), [0, 2, 1, 3]), [B, S, H·Dv])
// -> y = attention_nc(q, k, v, mask) {n_heads H, scale c (or 1/c)}. The mask subgraph stays;
// the op reads its output. Strict: every reshape target must be known to give [B, S, H, D]
// (constants, 0 = copy, or dims of q's own producer read through shape/gather/unsqueeze/
// concat), H and D must agree across q, k and v, every intermediate must have one reader, and
// anything else leaves the graph as it is.
int fuse_encoder_attention(Graph& graph);

// binary add(a, b) of two computed values whose only reader is layer_norm(sum, scale, bias,
// axis -1) -> add_layer_norm(a, b, scale, bias): the sum is normalised while still in cache.
int fuse_add_layer_norm(Graph& graph);

}  // namespace sampan::graph::passes
