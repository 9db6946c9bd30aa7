// Passes for imported transformer encoders (matmul_passes.cc). Each returns its rewrites.
#pragma once

#include "engine/graph/graph.h"

namespace sampan::graph::passes {

// x·0.5·(1 + erf(x/√2)) written out in binary/unary nodes (as ONNX exporters emit GELU before
// opset 20) -> unary gelu(x). Either association of the products, and x·(1/√2) for x/√2.
int fuse_gelu(Graph& graph);

// matmul(a, constant 2-D b) followed by binary add of a constant [n] -> matmul with that bias
// (added in the GEMM's epilogue).
int fuse_matmul_bias(Graph& graph);

// matmul followed by its only reader unary relu/gelu/gelu_tanh -> matmul's activation.
int fuse_matmul_activation(Graph& graph);

// matmul by a constant 2-D f32 b (not bf16) -> matmul_packed with B (b, or bᵀ for trans_b)
// packed once into the packed GEMM's panels (kernels/cpu/sgemm_packed_cpu.h); alpha, bias and
// activation carry over. Runs after the bias/activation fusions and the bf16 conversion.
// SAMPAN_MATMUL_PACK=0 turns it off (A/B benchmarks).
int pack_matmul_weights(Graph& graph);

}  // namespace sampan::graph::passes
