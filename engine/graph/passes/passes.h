// Graph rewrites. Each pass is a pure function of the graph: it matches a pattern of ops (not a
// model architecture) and returns how many rewrites it made, so the same passes serve any
// graph — LLMs today, ONNX/Paddle imports later. A pipeline runs named passes in order and
// reports what each did in one PassReport.
#pragma once

#include <map>
#include <string>
#include <vector>

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

// Nodes whose inputs are all constants run once on the CPU and become constants (outputs over
// 4M elements stay computed at run time).
int fold_constants(Graph& graph);

// identity nodes whose output is not a graph output: their consumers read the input instead.
int drop_identities(Graph& graph);

// What the caller asked of the pipeline beyond its default rewrites.
struct PassOptions {
  bool bf16 = false;  // classic models: run convert_precision_bf16 (precision_passes.h)
};

// One pass of a pipeline.
struct Pass {
  std::string name;  // the function's name, e.g. "fuse_add_rms_norm"
  int (*run)(Graph& graph);  // returns the rewrites it made
  // Whether the options ask for this pass; null: it always runs. A pass not asked for is left
  // out of the report.
  bool (*wanted)(const PassOptions& options) = nullptr;
};

// What one pass did. Node counts are of live nodes (not marked dead): before the pass, and after
// it and the dead-node removal that follows it.
struct PassStats {
  std::string name;
  int nodes_before = 0;
  int nodes_after = 0;
  int rewrites = 0;  // patterns matched and rewritten (fusions made)
};

// Live nodes by op name.
using OpHistogram = std::map<std::string, int>;
OpHistogram op_histogram(const Graph& graph);

struct PassReport {
  std::vector<PassStats> passes;  // in the order they ran
  OpHistogram ops_before;         // of the graph the pipeline was given
  OpHistogram ops_after;          // of the graph it left
  // The rewrites of the default pipeline's passes (also in `passes`; 0 for a pass not run).
  int add_rms_norm = 0;
  int gate_up_silu = 0;
  int sibling_linears = 0;

  // Rewrites made by the pass of that name, 0 when it did not run.
  int rewrites(const std::string& pass) const;
  // One line: "add+rms_norm: 1, gate/up+silu: 1, sibling linears (qkv): 1".
  std::string str() const;
  // One line per pass ("fuse_gate_up_silu: 2 rewrites, 30 -> 26 nodes"), then the op
  // histograms before and after, each line starting with `indent`.
  std::string table(const std::string& indent = "") const;
};

// The default pipeline, in order: gate/up first, so that afterwards the only sibling linears
// left sharing an input are Q/K/V.
const std::vector<Pass>& default_passes();

// Runs `pipeline` in order (the passes `options` want), removing dead nodes after each pass,
// then validates the graph.
PassReport run_passes(Graph& graph, const std::vector<Pass>& pipeline,
                      const PassOptions& options = {});

// run_passes(graph, default_passes(), options).
PassReport optimize(Graph& graph, const PassOptions& options = {});

}  // namespace sampan::graph::passes
