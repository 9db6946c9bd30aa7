// Graph rewrites. Each pass is a pure function of the graph: it matches a pattern of ops (not a
// model architecture) and returns how many rewrites it made, so the same passes serve any
// graph — LLMs today, ONNX/Paddle imports later.
#pragma once

#include <string>

#include "engine/graph/graph.h"

namespace sampan::graph::passes {

// add(a, b) followed by rms_norm(sum, w) -> add_rms_norm(a, b, w) producing both the sum (for the
// residual stream) and the normalised rows in one pass over memory.
int fuse_add_rms_norm(Graph& graph);

// silu_mul(linear(x, w_gate), linear(x, w_up)) -> linear(x, w_gate, w_up, epilogue=silu_mul):
// one GEMM over both weights, the [rows, 2F] intermediate never written.
int fuse_gate_up_silu(Graph& graph);

// Up to three single-block linear nodes reading the same input (Q, K and V) -> one linear over
// the concatenated weights (no weight copy) followed by a zero-copy split.
int fuse_sibling_linears(Graph& graph);

struct PassReport {
  int add_rms_norm = 0;
  int gate_up_silu = 0;
  int sibling_linears = 0;
  std::string str() const;
};

// The default pipeline, then dead-node removal.
PassReport optimize(Graph& graph);

}  // namespace sampan::graph::passes
