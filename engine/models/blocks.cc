#include "engine/models/blocks.h"

namespace sampan::models {

ValueId linear(Graph& g, const std::string& name, ValueId x, const Linear& w) {
  std::vector<ValueId> inputs = {x, g.add_constant(name + ".weight", w.weight)};
  if (w.bias.defined() && w.bias.numel() > 0) inputs.push_back(g.add_constant(name + ".bias", w.bias));
  return g.add("linear", name, std::move(inputs));
}

ValueId rms_norm(Graph& g, const std::string& name, ValueId x, const Tensor& weight, double eps) {
  return g.add("rms_norm", name, {x, g.add_constant(name + ".weight", weight)}, {{"eps", eps}});
}

ValueId attention(Graph& g, const std::string& name, ValueId x, const AttentionWeights& w,
                  const AttentionParams& p, const DecoderInputs& in, ValueId k_cache,
                  ValueId v_cache) {
  const ValueId q = linear(g, name + ".q_proj", x, w.q);
  const ValueId k = linear(g, name + ".k_proj", x, w.k);
  const ValueId v = linear(g, name + ".v_proj", x, w.v);
  const graph::Attributes q_rope = {{"n_heads", p.n_heads}, {"head_dim", p.head_dim},
                                    {"attn_factor", p.rope_attn_factor}};
  const graph::Attributes k_rope = {{"n_heads", p.n_kv_heads}, {"head_dim", p.head_dim},
                                    {"attn_factor", p.rope_attn_factor}};
  const ValueId qr = g.add("rope", name + ".q_rope", {q, in.positions, in.inv_freq}, q_rope);
  const ValueId kr = g.add("rope", name + ".k_rope", {k, in.positions, in.inv_freq}, k_rope);
  const ValueId a = g.add("attention", name + ".attn",
                          {qr, kr, v, k_cache, v_cache, in.positions, in.seq_ids, in.block_tables},
                          {{"n_heads", p.n_heads},
                           {"n_kv_heads", p.n_kv_heads},
                           {"head_dim", p.head_dim},
                           {"scale", p.scale},
                           {"sliding_window", p.sliding_window}});
  return linear(g, name + ".o_proj", a, w.o);
}

ValueId swiglu_ffn(Graph& g, const std::string& name, ValueId x, const Linear& gate,
                   const Linear& up, const Linear& down) {
  const ValueId gv = linear(g, name + ".gate_proj", x, gate);
  const ValueId uv = linear(g, name + ".up_proj", x, up);
  const ValueId h = g.add("silu_mul", name + ".act", {gv, uv});
  return linear(g, name + ".down_proj", h, down);
}

}  // namespace sampan::models
