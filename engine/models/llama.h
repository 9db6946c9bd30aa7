// The Llama-family decoder (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM): one
// architecture file, built in three phases — hyper-parameters (HfConfig), tensors (checked
// against the shapes the config implies), graph (shared blocks from blocks.h). The three
// architectures differ only in config: biases, sliding window, rope scaling, tied embeddings.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/blocks.h"

namespace sampan::models {

struct LlamaLayerWeights {
  Tensor attn_norm;  // [hidden] f32
  AttentionWeights attn;
  Tensor ffn_norm;   // [hidden] f32
  Linear gate, up, down;
};

struct LlamaWeights {
  Tensor tok_embd;   // [vocab, hidden]
  std::vector<LlamaLayerWeights> layers;
  Tensor output_norm;  // [hidden] f32
  Linear output;       // lm_head [vocab, hidden] (the embedding table when tied)
};

// Phase 2: every tensor the config implies, with its shape and dtype checked. Norm weights and
// biases (1-D, small) are converted to f32; matrices stay as mapped from the file.
LlamaWeights load_llama_weights(const HfConfig& config, const WeightStore& store);

// Graph inputs of the built graph (names are part of the contract with the runtime):
//   "ids"        [n_tokens] i32
//   "positions"  [n_tokens] i32 absolute positions (also where K/V rows are written)
//   "logit_rows" [n_out] i32 rows of the token batch whose logits are computed
//   "k_cache.<l>", "v_cache.<l>"  [kv_capacity, n_head_kv * head_dim] f32, one pair per layer
// Output: logits [n_out, vocab] f32.
graph::Graph build_llama_graph(const HfConfig& config, const LlamaWeights& weights);

}  // namespace sampan::models
