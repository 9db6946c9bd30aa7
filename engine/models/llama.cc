#include "engine/models/llama.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/models/rope_freqs.h"

namespace sampan::models {
namespace {

const std::vector<DType> kWeightTypes = {DType::kBF16, DType::kF16, DType::kF32};

Tensor vector_f32(const WeightStore& store, const std::string& name, int64_t n) {
  return store.get_as(name, {n}, kWeightTypes).to_f32();
}

Linear load_linear(const WeightStore& store, const std::string& name, int64_t out, int64_t in,
                   bool bias) {
  Linear l;
  l.weight = store.get_as(name + ".weight", {out, in}, kWeightTypes);
  if (bias) l.bias = vector_f32(store, name + ".bias", out);
  return l;
}

}  // namespace

LlamaWeights load_llama_weights(const HfConfig& c, const WeightStore& store,
                                const ModelBuildOptions& options) {
  LlamaWeights w;
  const int64_t d = c.hidden_size;
  w.tok_embd = store.get_as("model.embed_tokens.weight", {c.vocab_size, d}, kWeightTypes);
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.attn_norm = vector_f32(store, p + "input_layernorm.weight", d);
    l.attn.q = load_linear(store, p + "self_attn.q_proj", c.q_dim(), d, c.bias_q);
    l.attn.k = load_linear(store, p + "self_attn.k_proj", c.kv_dim(), d, c.bias_k);
    l.attn.v = load_linear(store, p + "self_attn.v_proj", c.kv_dim(), d, c.bias_v);
    l.attn.o = load_linear(store, p + "self_attn.o_proj", d, c.q_dim(), c.bias_o);
    l.ffn_norm = vector_f32(store, p + "post_attention_layernorm.weight", d);
    l.gate = load_linear(store, p + "mlp.gate_proj", c.intermediate_size, d, c.bias_mlp);
    l.up = load_linear(store, p + "mlp.up_proj", c.intermediate_size, d, c.bias_mlp);
    l.down = load_linear(store, p + "mlp.down_proj", d, c.intermediate_size, c.bias_mlp);
  }
  w.output_norm = vector_f32(store, "model.norm.weight", d);
  if (c.tie_word_embeddings) {
    w.output.weight = w.tok_embd;
  } else {
    w.output.weight = store.get_as("lm_head.weight", {c.vocab_size, d}, kWeightTypes);
  }
  return w;
}

graph::Graph build_llama_graph(const HfConfig& c, const LlamaWeights& w,
                               const ModelBuildOptions& options) {
  using graph::Dim;
  graph::Graph g;
  const Dim n_tokens = Dim::sym("n_tokens");
  const ValueId ids = g.add_input("ids", DType::kI32, {n_tokens});
  DecoderInputs in;
  in.positions = g.add_input("positions", DType::kI32, {n_tokens});
  in.seq_ids = g.add_input("seq_ids", DType::kI32, {n_tokens});
  in.block_tables =
      g.add_input("block_tables", DType::kI32, {Dim::sym("n_seqs"), Dim::sym("max_blocks")});
  const ValueId logit_rows = g.add_input("logit_rows", DType::kI32, {Dim::sym("n_out")});

  const RopeFreqs rope = compute_rope_freqs(c);
  in.inv_freq = g.add_constant(
      "rope.inv_freq", Tensor::from_f32({static_cast<int64_t>(rope.inv_freq.size())}, rope.inv_freq));

  AttentionParams ap;
  ap.n_heads = c.n_head;
  ap.n_kv_heads = c.n_head_kv;
  ap.head_dim = c.head_dim;
  ap.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  ap.rope_attn_factor = rope.attention_factor;

  ValueId h = g.add("embedding", "tok_embd", {ids, g.add_constant("tok_embd.weight", w.tok_embd)});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("layers.{}", i);
    const LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::vector<Dim> pool = {Dim::sym("n_blocks"), Dim::sym("block_size"),
                                   Dim::fixed(c.kv_dim())};
    const ValueId k_cache = g.add_input(fmt::format("k_cache.{}", i), DType::kF32, pool);
    const ValueId v_cache = g.add_input(fmt::format("v_cache.{}", i), DType::kF32, pool);
    ap.sliding_window = c.layer_is_sliding(i) ? *c.sliding_window : 0;
    const ValueId x = rms_norm(g, p + ".attn_norm", h, l.attn_norm, c.rms_norm_eps);
    const ValueId a = attention(g, p + ".attn", x, l.attn, ap, in, k_cache, v_cache);
    h = g.add("add", p + ".attn_residual", {h, a});
    const ValueId y = rms_norm(g, p + ".ffn_norm", h, l.ffn_norm, c.rms_norm_eps);
    const ValueId f = swiglu_ffn(g, p + ".ffn", y, l.gate, l.up, l.down);
    h = g.add("add", p + ".ffn_residual", {h, f});
  }
  const ValueId rows = g.add("gather_rows", "logit_rows", {h, logit_rows});
  const ValueId n = rms_norm(g, "output_norm", rows, w.output_norm, c.rms_norm_eps);
  g.mark_output(linear(g, "lm_head", n, w.output));
  return g;
}

}  // namespace sampan::models
