#include "engine/train/train_graph.h"

#include <cmath>
#include <map>
#include <utility>

#include "engine/core/error.h"
#include "engine/models/blocks.h"
#include "engine/models/rope_freqs.h"
#include "engine/train/autograd.h"

namespace sampan::train {
namespace {

using graph::Dim;
using graph::ValueId;
using models::Linear;

struct Builder {
  graph::Graph& g;
  const models::LoraConfig& lora;
  const TrainGraphOptions& options;
  ValueId seed = graph::kNoValue;
  std::vector<bool> targeted = std::vector<bool>(models::kLoraModuleCount, false);
  std::vector<LoraParam> params;

  // Tells the linear producing y that both its operands hold bf16 values only (ops/linear.h:
  // its GEMM may then run in bf16 at no cost in precision).
  void mark_bf16_operands(ValueId y) {
    graph::Node& n = g.mutable_node(g.value(y).producer);
    SAMPAN_CHECK(n.op == "linear", ErrorCode::kInternal, "{}: not a linear", n.name);
    n.attrs.set("bf16_operands", int64_t{1});
  }

  // The base projection plus, when `module` is targeted, its LoRA branch.
  ValueId lora_linear(const std::string& name, ValueId x, const Linear& w, int64_t layer,
                      int module, int64_t in, int64_t out) {
    if (options.bf16) x = g.add("round_bf16", name + ".x_bf16", {x});
    ValueId y = models::linear(g, name, x, w);
    if (options.bf16 && w.weight.dtype() == DType::kBF16) mark_bf16_operands(y);
    if (options.bf16) y = g.add("round_grad_bf16", name + ".y_bf16", {y});
    if (!targeted[static_cast<size_t>(module)]) return y;
    const std::string base =
        "lora." + std::to_string(layer) + "." + models::kLoraModules[static_cast<size_t>(module)];
    const ValueId a =
        g.add_input(base + ".A", DType::kF32, {Dim::fixed(lora.rank), Dim::fixed(in)});
    const ValueId b =
        g.add_input(base + ".B", DType::kF32, {Dim::fixed(out), Dim::fixed(lora.rank)});
    params.push_back({layer, module, 'A', base + ".A", a});
    params.push_back({layer, module, 'B', base + ".B", b});
    // A distinct mask per projection: the salt numbers (layer, module).
    const int64_t salt = layer * models::kLoraModuleCount + module + 1;
    ValueId xd = g.add("scaled_dropout", name + ".lora_dropout", {x, seed},
                       {{"p", options.dropout}, {"scale", lora.scale()}, {"salt", salt}});
    ValueId a_in = a, b_in = b;
    if (options.bf16) {
      // The scaled input and the rank-r intermediate are GEMM operands too (u of both GEMMs:
      // its rounding also rounds the gradient reaching the first one).
      xd = g.add("round_bf16", name + ".lora_x_bf16", {xd});
      a_in = g.add("round_bf16", name + ".lora_A_bf16", {a});
      b_in = g.add("round_bf16", name + ".lora_B_bf16", {b});
    }
    ValueId u = g.add("linear", name + ".lora_A", {xd, a_in});
    if (options.bf16) mark_bf16_operands(u);
    if (options.bf16) u = g.add("round_bf16", name + ".lora_A_out_bf16", {u});
    ValueId v = g.add("linear", name + ".lora_B", {u, b_in});
    if (options.bf16) mark_bf16_operands(v);
    if (options.bf16)
      v = g.add("round_grad_bf16", name + ".lora_B_out_bf16", {v});
    return g.add("add", name + ".lora_add", {y, v});
  }
};

// bf16 training rounds some values more than once: the q, k and v projections each round their
// common input (gate and up likewise), and a targeted projection's output gradient is rounded
// once for the base linear's dx and once for its LoRA B, both from the same incoming gradient.
// Those are identical computations: later copies are dropped and their readers read the first.
// Done on the finished graph, after the backward was built, so each forward rounding keeps its
// own gradient rounding (merged before autograd, the rule would round the sum of the three input
// gradients instead of summing three rounded ones): the results do not change by a bit.
// Recomputed copies merge only among themselves (merged into a forward node, that activation
// would stay alive across the recompute segment).
int merge_duplicate_roundings(graph::Graph& g) {
  std::map<std::pair<ValueId, bool>, ValueId> first;  // (input, recomputed copy) -> output
  int merged = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    if (n.dead || n.op != "round_bf16" || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
    const bool copy = n.name.ends_with(".recompute");
    const auto [it, inserted] = first.try_emplace({n.inputs[0], copy}, n.outputs[0]);
    if (inserted || g.is_output(n.outputs[0])) continue;
    const ValueId from = n.outputs[0];
    g.mutable_nodes()[i].dead = true;
    g.replace_uses(from, it->second);
    ++merged;
  }
  if (merged > 0) g.compact();
  return merged;
}

// A round_bf16 whose every reader is a GEMM's x (input 0 of linear or linear_cross_entropy) or
// dy (linear_grad_input input 0) is folded into them as their round_x_bf16 / round_dy_bf16
// attribute, and one whose input is only its own and a linear_grad_input's dx into that
// producer (round_dx_bf16): the same results, bit for bit (ops/linear.h), without the node's
// pass over memory and its buffer. With bf16 weights on AMX CPUs the tiles round while packing,
// so the rounding costs nothing; elsewhere the GEMM rounds a copy. bf16 training rounds the
// inputs of the projections that carry no adapter and the gradients of every projection's
// output, half of its roundings on the 1.1B shape with adapters on q/k/v/o; inputs of targeted
// projections also feed the LoRA dropout and stay. (lm_head's output gradient is rounded inside
// linear_cross_entropy: round_dy_bf16.) Returns the number folded.
int fold_roundings_into_gemms(graph::Graph& g) {
  std::map<ValueId, std::vector<std::pair<size_t, size_t>>> readers;  // value -> (node, input)
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    if (n.dead) continue;
    for (size_t j = 0; j < n.inputs.size(); ++j) readers[n.inputs[j]].emplace_back(i, j);
  }
  int folded = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    if (n.dead || n.op != "round_bf16" || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
    const ValueId out = n.outputs[0];
    const auto it = readers.find(out);
    if (g.is_output(out) || it == readers.end()) continue;
    bool all_gemms = true;
    for (const auto& [node, input] : it->second) {
      const std::string& op = g.nodes()[node].op;
      all_gemms = all_gemms && input == 0 &&
                  (op == "linear" || op == "linear_grad_input" || op == "linear_cross_entropy");
    }
    if (!all_gemms) continue;
    for (const auto& [node, input] : it->second) {
      graph::Node& r = g.mutable_nodes()[node];
      r.attrs.set(r.op == "linear_grad_input" ? "round_dy_bf16" : "round_x_bf16", int64_t{1});
    }
    const ValueId from = n.inputs[0];
    g.mutable_nodes()[i].dead = true;
    g.replace_uses(out, from);
    readers[from].insert(readers[from].end(), it->second.begin(), it->second.end());
    ++folded;
  }
  // A rounding whose input is a linear_grad_input's dx read by nothing else (the gradient of a
  // projection's rounded input where that projection has no adapter, and lm_head's) becomes the
  // producer's round_dx_bf16: the tiles round dx as they store it. `readers` still lists the
  // roundings folded above (dead) with their readers added: a value they read counts as read
  // more than once, which only skips folds, never allows a wrong one.
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    if (n.dead || n.op != "round_bf16" || n.inputs.size() != 1 || n.outputs.size() != 1) continue;
    const ValueId in = n.inputs[0], out = n.outputs[0];
    const graph::NodeId p = g.value(in).producer;
    if (p < 0 || g.node(p).op != "linear_grad_input" || g.is_output(in) || g.is_output(out) ||
        readers[in].size() != 1) {
      continue;
    }
    g.mutable_node(p).attrs.set("round_dx_bf16", int64_t{1});
    g.mutable_nodes()[i].dead = true;
    g.replace_uses(out, in);
    readers[in] = readers[out];
    ++folded;
  }
  if (folded > 0) g.compact();
  return folded;
}

}  // namespace

TrainGraph build_train_graph(const HfConfig& c, const models::LlamaWeights& w,
                             const models::LoraConfig& lora, const TrainGraphOptions& options) {
  SAMPAN_CHECK(lora.rank > 0, ErrorCode::kInvalidArgument, "LoRA rank {} must be positive",
               lora.rank);
  SAMPAN_CHECK(w.layers.size() == static_cast<size_t>(c.n_layer), ErrorCode::kInvalidArgument,
               "{}: {} layers of weights for {} layers", c.source, w.layers.size(), c.n_layer);
  TrainGraph tg;
  graph::Graph& g = tg.graph;
  Builder bld{g, lora, options};
  for (const std::string& t : lora.targets) {
    const int m = models::lora_module_index(t);
    SAMPAN_CHECK(m >= 0, ErrorCode::kInvalidArgument,
                 "LoRA target '{}' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, "
                 "up_proj, down_proj",
                 t);
    bld.targeted[static_cast<size_t>(m)] = true;
  }
  const Dim rows = Dim::sym("n_rows");
  const ValueId ids = g.add_input("ids", DType::kI32, {rows});
  const ValueId positions = g.add_input("positions", DType::kI32, {rows});
  const ValueId lengths = g.add_input("lengths", DType::kI32, {Dim::sym("batch")});
  const ValueId targets = g.add_input("targets", DType::kI32, {rows});
  bld.seed = g.add_input("dropout_seed", DType::kI32, {Dim::fixed(2)});

  // RoPE exactly as build_llama_graph computes it (llama3 scaling, GGUF frequency factors).
  RopeFreqs rope = compute_rope_freqs(c);
  if (!w.rope_freq_factors.empty()) {
    SAMPAN_CHECK(w.rope_freq_factors.size() == rope.inv_freq.size(), ErrorCode::kInvalidModel,
                 "{}: rope_freqs has {} factors, expected head_dim / 2 = {}", c.source,
                 w.rope_freq_factors.size(), rope.inv_freq.size());
    for (size_t i = 0; i < rope.inv_freq.size(); ++i) rope.inv_freq[i] /= w.rope_freq_factors[i];
  }
  const ValueId inv_freq =
      g.add_constant("rope.inv_freq",
                     Tensor::from_f32({static_cast<int64_t>(rope.inv_freq.size())}, rope.inv_freq));

  graph::Attributes embd_attrs;
  if (w.tok_embd.dtype() == DType::kU8) {
    embd_attrs.set("ggml_type", static_cast<int64_t>(w.tok_embd_type));
  }
  ValueId h = g.add("embedding", "tok_embd", {ids, g.add_constant("tok_embd.weight", w.tok_embd)},
                    std::move(embd_attrs));
  const int64_t d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.intermediate_size;
  BackwardOptions backward;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const size_t first_node = g.nodes().size();
    const std::string p = "layers." + std::to_string(i);
    const models::LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    const ValueId x = models::rms_norm(g, p + ".attn_norm", h, l.attn_norm, c.rms_norm_eps);
    const ValueId q = bld.lora_linear(p + ".attn.q_proj", x, l.attn.q, i, 0, d, qd);
    const ValueId k = bld.lora_linear(p + ".attn.k_proj", x, l.attn.k, i, 1, d, kvd);
    const ValueId v = bld.lora_linear(p + ".attn.v_proj", x, l.attn.v, i, 2, d, kvd);
    const graph::Attributes q_rope = {{"n_heads", c.n_head},
                                      {"head_dim", c.head_dim},
                                      {"attn_factor", static_cast<double>(rope.attention_factor)}};
    const graph::Attributes k_rope = {{"n_heads", c.n_head_kv},
                                      {"head_dim", c.head_dim},
                                      {"attn_factor", static_cast<double>(rope.attention_factor)}};
    const ValueId qr = g.add("rope", p + ".attn.q_rope", {q, positions, inv_freq}, q_rope);
    const ValueId kr = g.add("rope", p + ".attn.k_rope", {k, positions, inv_freq}, k_rope);
    const int64_t window = c.layer_is_sliding(i) ? *c.sliding_window : 0;
    const ValueId a = g.add_node("causal_attention", p + ".attn.attn", {qr, kr, v, lengths},
                                 {{"n_heads", c.n_head},
                                  {"n_kv_heads", c.n_head_kv},
                                  {"head_dim", c.head_dim},
                                  {"scale", 1.0 / std::sqrt(static_cast<double>(c.head_dim))},
                                  {"sliding_window", window},
                                  {"bf16_products", int64_t{options.bf16 ? 1 : 0}}},
                                 2)[0];
    const ValueId o = bld.lora_linear(p + ".attn.o_proj", a, l.attn.o, i, 3, qd, d);
    h = g.add("add", p + ".attn_residual", {h, o});
    const ValueId y = models::rms_norm(g, p + ".ffn_norm", h, l.ffn_norm, c.rms_norm_eps);
    const ValueId gate = bld.lora_linear(p + ".ffn.gate_proj", y, l.gate, i, 4, d, ff);
    const ValueId up = bld.lora_linear(p + ".ffn.up_proj", y, l.up, i, 5, d, ff);
    ValueId act = g.add("silu_mul", p + ".ffn.act", {gate, up});
    if (w.down_hadamard_block > 0) {
      act = g.add("hadamard", p + ".ffn.down_hadamard", {act}, {{"block", w.down_hadamard_block}});
    }
    const ValueId f = bld.lora_linear(p + ".ffn.down_proj", act, l.down, i, 6, ff, d);
    h = g.add("add", p + ".ffn_residual", {h, f});
    // The layer's input h is its checkpoint; everything it computes may be recomputed.
    if (options.recompute) backward.recompute.emplace_back(first_node, g.nodes().size());
  }
  ValueId n = models::rms_norm(g, "output_norm", h, w.output_norm, c.rms_norm_eps);
  if (options.bf16) n = g.add("round_bf16", "lm_head.x_bf16", {n});
  // The LM head and the summed loss as one node (engine/ops/linear_cross_entropy.cc): the
  // [rows, vocab] logits and their gradient are never held whole, and with a backward the node
  // forms d(loss)/dx itself. What the unfused linear -> (bf16: round_grad_bf16) -> cross_entropy
  // computed: in bf16 training the GEMM's operands marked bf16 where the weights are, and the
  // logits' gradient rounded to bf16 before it meets the weights.
  std::vector<ValueId> head = models::linear_slots(g, "lm_head", n, w.output);
  head.push_back(targets);
  graph::Attributes head_attrs = models::linear_attrs(w.output);
  head_attrs.set("ignore_index", int64_t{-100});
  head_attrs.set("with_grad", int64_t{options.backward ? 1 : 0});
  if (options.bf16) head_attrs.set("round_dy_bf16", int64_t{1});
  if (options.bf16 && w.output.weight.dtype() == DType::kBF16) {
    head_attrs.set("bf16_operands", int64_t{1});
  }
  tg.loss = g.add_node("linear_cross_entropy", "loss", std::move(head), std::move(head_attrs),
                       3)[0];
  g.mark_output(tg.loss);
  SAMPAN_CHECK(!bld.params.empty(), ErrorCode::kInvalidArgument,
               "the LoRA adapter targets no projection");
  tg.params = std::move(bld.params);
  if (options.backward) {
    std::vector<ValueId> wrt;
    for (const LoraParam& prm : tg.params) wrt.push_back(prm.value);
    const std::vector<ValueId> grads = build_backward(g, tg.loss, wrt, backward);
    for (size_t i = 0; i < grads.size(); ++i) tg.params[i].grad = grads[i];
  }
  if (options.bf16 && options.merge_roundings) merge_duplicate_roundings(g);
  if (options.bf16 && options.fold_roundings) fold_roundings_into_gemms(g);
  g.validate();
  return tg;
}

}  // namespace sampan::train
