// Precision rewrites for classic models (issue 16: f32 by default, bf16 when asked).
#pragma once

#include "engine/graph/graph.h"
#include "engine/graph/passes/passes.h"

namespace sampan::graph::passes {

// Marks every conv2d and matmul whose GEMM input is a CPU f32 constant with precision = "bf16"
// and replaces that constant by a new bf16 one (round to nearest even, same shape, row-major):
// the layout the bf16 kernels read (kernels/cpu/conv_cpu.h, conv2d_bf16 and matmul_bf16), made
// once here instead of on every run. Which nodes: conv2d with a constant weight [o, c/g, kh, kw]
// except convs whose groups read one input channel each (depthwise: no GEMM to speed up);
// matmul with a constant 2-D b [k, n] and no trans_b (the form that runs as a 1x1 conv). A
// constant shared by several such nodes is converted once. Activations, biases, residuals and
// every other op stay f32. The rewrites: nodes marked.
int convert_precision_bf16(Graph& graph);

// The pipeline's condition for convert_precision_bf16: options.bf16.
bool wants_bf16(const PassOptions& options);

}  // namespace sampan::graph::passes
