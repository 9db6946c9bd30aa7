#include <fmt/format.h>

#include "engine/graph/passes/passes.h"

namespace sampan::graph::passes {

std::string PassReport::str() const {
  return fmt::format("add+rms_norm: {}, gate/up+silu: {}, sibling linears (qkv): {}", add_rms_norm,
                     gate_up_silu, sibling_linears);
}

PassReport optimize(Graph& graph) {
  PassReport r;
  // gate/up first: afterwards the only sibling linears left sharing an input are Q/K/V.
  r.gate_up_silu = fuse_gate_up_silu(graph);
  graph.compact();
  r.sibling_linears = fuse_sibling_linears(graph);
  r.add_rms_norm = fuse_add_rms_norm(graph);
  graph.compact();
  graph.validate();
  return r;
}

}  // namespace sampan::graph::passes
