#include <fmt/format.h>

#include "engine/graph/passes/passes.h"
#include "engine/graph/passes/conv_passes.h"
#include "engine/graph/passes/encoder_passes.h"
#include "engine/graph/passes/layout_passes.h"
#include "engine/graph/passes/matmul_passes.h"
#include "engine/graph/passes/precision_passes.h"

namespace sampan::graph::passes {
namespace {

int live_nodes(const Graph& graph) {
  int n = 0;
  for (const Node& node : graph.nodes()) n += node.dead ? 0 : 1;
  return n;
}

std::string histogram_str(const OpHistogram& ops) {
  std::string s;
  for (const auto& [op, count] : ops) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", op, count);
  return s.empty() ? "none" : s;
}

}  // namespace

OpHistogram op_histogram(const Graph& graph) {
  OpHistogram ops;
  for (const Node& node : graph.nodes()) {
    if (!node.dead) ++ops[node.op];
  }
  return ops;
}

int PassReport::rewrites(const std::string& pass) const {
  int n = 0;
  for (const PassStats& p : passes) n += p.name == pass ? p.rewrites : 0;
  return n;
}

std::string PassReport::str() const {
  return fmt::format("add+rms_norm: {}, gate/up+silu: {}, sibling linears (qkv): {}", add_rms_norm,
                     gate_up_silu, sibling_linears);
}

std::string PassReport::table(const std::string& indent) const {
  std::string s;
  for (const PassStats& p : passes) {
    s += fmt::format("{}{}: {} rewrite{}, {} -> {} nodes\n", indent, p.name, p.rewrites,
                     p.rewrites == 1 ? "" : "s", p.nodes_before, p.nodes_after);
  }
  s += fmt::format("{}ops before: {}\n", indent, histogram_str(ops_before));
  s += fmt::format("{}ops after:  {}\n", indent, histogram_str(ops_after));
  return s;
}

const std::vector<Pass>& default_passes() {
  static const std::vector<Pass> pipeline = {
      {"drop_identities", drop_identities},
      {"fold_constants", fold_constants},
      {"fold_conv_batch_norm", fold_conv_batch_norm},
      {"fuse_conv_residual", fuse_conv_residual},
      {"fuse_conv_activation", fuse_conv_activation},
      {"fuse_gelu", fuse_gelu},
      {"fuse_matmul_bias", fuse_matmul_bias},
      {"fuse_matmul_activation", fuse_matmul_activation},
      {"fuse_encoder_attention", fuse_encoder_attention},
      {"fuse_add_layer_norm", fuse_add_layer_norm},
      {"fuse_gate_up_silu", fuse_gate_up_silu},
      {"fuse_sibling_linears", fuse_sibling_linears},
      {"fuse_add_rms_norm", fuse_add_rms_norm},
      {"convert_precision_bf16", convert_precision_bf16, wants_bf16},
      {"pack_matmul_weights", pack_matmul_weights},
      {"choose_conv_layout", choose_conv_layout},
  };
  return pipeline;
}

PassReport run_passes(Graph& graph, const std::vector<Pass>& pipeline,
                      const PassOptions& options) {
  PassReport r;
  r.ops_before = op_histogram(graph);
  for (const Pass& pass : pipeline) {
    if (pass.wanted && !pass.wanted(options)) continue;
    PassStats& st = r.passes.emplace_back();
    st.name = pass.name;
    st.nodes_before = live_nodes(graph);
    st.rewrites = pass.run(graph);
    graph.compact();
    st.nodes_after = live_nodes(graph);
  }
  graph.validate();
  r.ops_after = op_histogram(graph);
  r.gate_up_silu = r.rewrites("fuse_gate_up_silu");
  r.sibling_linears = r.rewrites("fuse_sibling_linears");
  r.add_rms_norm = r.rewrites("fuse_add_rms_norm");
  return r;
}

PassReport optimize(Graph& graph, const PassOptions& options) {
  return run_passes(graph, default_passes(), options);
}

}  // namespace sampan::graph::passes
