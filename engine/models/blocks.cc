#include "engine/models/blocks.h"

#include "kernels/common/hadamard_block.h"

namespace sampan::models {

namespace {

bool present(const Tensor& t) { return t.defined() && t.numel() > 0; }

// The projection's output plus its adapters' deltas, when any adapter targets it.
ValueId with_lora(Graph& g, const std::string& name, ValueId y, ValueId x, const LoraStack* lora,
                  ValueId ids) {
  if (lora == nullptr || !lora->defined()) return y;
  return g.add("lora", name + ".lora",
               {y, x, ids, g.add_constant(name + ".lora_a", lora->a),
                g.add_constant(name + ".lora_b", lora->b),
                g.add_constant(name + ".lora_scale", lora->scale)});
}

const LoraStack* module_lora(const LayerLora* lora, int index) {
  return lora == nullptr ? nullptr : &lora->modules[static_cast<size_t>(index)];
}

ValueId lora_ids(const LayerLora* lora) { return lora == nullptr ? graph::kNoValue : lora->ids; }

}  // namespace

std::vector<ValueId> linear_slots(Graph& g, const std::string& name, ValueId x, const Linear& w) {
  // The op's fixed slots (engine/ops/linear.cc): x, weight, bias, scales, zeros.
  return {x, g.add_constant(name + ".weight", w.weight),
          present(w.bias) ? g.add_constant(name + ".bias", w.bias) : graph::kNoValue,
          present(w.scales) ? g.add_constant(name + ".weight_scale", w.scales) : graph::kNoValue,
          present(w.zeros) ? g.add_constant(name + ".weight_zero", w.zeros) : graph::kNoValue};
}

graph::Attributes linear_attrs(const Linear& w) {
  graph::Attributes attrs;
  if (w.weight.dtype() == DType::kI4) attrs.set("group_size", w.group_size);
  if (w.weight.dtype() == DType::kU8) attrs.set("ggml_type", static_cast<int64_t>(w.ggml_type));
  return attrs;
}

ValueId linear(Graph& g, const std::string& name, ValueId x, const Linear& w,
               const LoraStack* lora, ValueId lora_ids) {
  std::vector<ValueId> inputs = linear_slots(g, name, x, w);
  while (inputs.back() == graph::kNoValue) inputs.pop_back();  // trailing absent slots left out
  const ValueId y = g.add("linear", name, std::move(inputs), linear_attrs(w));
  return with_lora(g, name, y, x, lora, lora_ids);
}

ValueId rms_norm(Graph& g, const std::string& name, ValueId x, const Tensor& weight, double eps) {
  return g.add("rms_norm", name, {x, g.add_constant(name + ".weight", weight)}, {{"eps", eps}});
}

ValueId attention(Graph& g, const std::string& name, ValueId x, const AttentionWeights& w,
                  const AttentionParams& p, const DecoderInputs& in, ValueId k_cache,
                  ValueId v_cache, const LayerLora* lora) {
  const ValueId ids = lora_ids(lora);
  const ValueId q = linear(g, name + ".q_proj", x, w.q, module_lora(lora, 0), ids);
  const ValueId k = linear(g, name + ".k_proj", x, w.k, module_lora(lora, 1), ids);
  const ValueId v = linear(g, name + ".v_proj", x, w.v, module_lora(lora, 2), ids);
  const graph::Attributes q_rope = {{"n_heads", p.n_heads}, {"head_dim", p.head_dim},
                                    {"attn_factor", p.rope_attn_factor}};
  const graph::Attributes k_rope = {{"n_heads", p.n_kv_heads}, {"head_dim", p.head_dim},
                                    {"attn_factor", p.rope_attn_factor}};
  ValueId qr = g.add("rope", name + ".q_rope", {q, in.positions, in.inv_freq}, q_rope);
  ValueId kr = g.add("rope", name + ".k_rope", {k, in.positions, in.inv_freq}, k_rope);
  if (p.qk_hadamard) {
    // The same orthogonal transform on every Q and K head leaves q·k unchanged; blocks stay
    // inside a head (a power of two dividing head_dim).
    const graph::Attributes h = {{"block", hadamard_block_for(p.head_dim)}};
    qr = g.add("hadamard", name + ".q_hadamard", {qr}, h);
    kr = g.add("hadamard", name + ".k_hadamard", {kr}, h);
  }
  const ValueId a = g.add("attention", name + ".attn",
                          {qr, kr, v, k_cache, v_cache, in.positions, in.seq_ids, in.block_tables},
                          {{"n_heads", p.n_heads},
                           {"n_kv_heads", p.n_kv_heads},
                           {"head_dim", p.head_dim},
                           {"scale", p.scale},
                           {"sliding_window", p.sliding_window},
                           {"kv_dtype", std::string(kv_dtype_name(p.kv_dtype))}});
  return linear(g, name + ".o_proj", a, w.o, module_lora(lora, 3), ids);
}

ValueId swiglu_ffn(Graph& g, const std::string& name, ValueId x, const Linear& gate,
                   const Linear& up, const Linear& down, int64_t down_hadamard_block,
                   const LayerLora* lora) {
  const ValueId ids = lora_ids(lora);
  const ValueId gv = linear(g, name + ".gate_proj", x, gate, module_lora(lora, 4), ids);
  const ValueId uv = linear(g, name + ".up_proj", x, up, module_lora(lora, 5), ids);
  ValueId h = g.add("silu_mul", name + ".act", {gv, uv});
  if (down_hadamard_block > 0) {
    h = g.add("hadamard", name + ".down_hadamard", {h}, {{"block", down_hadamard_block}});
  }
  return linear(g, name + ".down_proj", h, down, module_lora(lora, 6), ids);
}

}  // namespace sampan::models
