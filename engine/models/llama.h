// The Llama-family decoder (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM): one
// architecture file, built in three phases — hyper-parameters (HfConfig), tensors (checked
// against the shapes the config implies), graph (shared blocks from blocks.h). The three
// architectures differ only in config: biases, sliding window, rope scaling, tied embeddings.
//
// Input contract of the built graph (what a runtime feeds on every forward). One forward runs a
// batch of T tokens drawn from any number of sequences (continuous batching: prefill chunks of
// some sequences and single decode tokens of others, in any order):
//   "ids"          [T] i32  token ids.
//   "positions"    [T] i32  position of each token in its sequence (RoPE, causal mask, and where
//                           its K/V row is written).
//   "seq_ids"      [T] i32  the row of block_tables each token belongs to (0 .. n_seqs-1).
//   "block_tables" [n_seqs, max_blocks] i32  physical KV block ids per sequence: position p of
//                           sequence s lives in block block_tables[s][p / block_size], row
//                           p % block_size. Entries no token of this batch needs (beyond the
//                           highest position, or wholly below a sliding window) may be -1.
//   "logit_rows"   [n_out] i32  rows of the batch (0 .. T-1) whose logits are returned.
//   "k_cache.<l>", "v_cache.<l>"  [n_blocks, block_size, n_head_kv * head_dim] f32 per layer:
//                           the KV pools, bound by reference and written in place.
//   "lora_ids"     [T] i32  only when built with LoRA adapters (ModelBuildOptions::lora): each
//                           token's adapter, an index into options.lora, or -1 for the base.
//                           Every projection an adapter targets is followed by a `lora` node
//                           (engine/ops/lora.cc); a token's K/V then depend on its adapter.
// Output 0: logits [n_out, vocab] f32, row i for token logit_rows[i].
// Each layer first writes the K/V of every token of the batch, then lets each token attend to
// positions max(0, p - window + 1) .. p of its own sequence. So a token sees the K/V of earlier
// tokens of the same batch, and earlier positions of its sequence not in the batch must already
// hold K/V from earlier forwards (or from a shared prefix block). Two tokens of one batch must
// never map to the same (block, row); blocks shared between sequences (prefix cache) may be read
// by many but written by none. Out-of-range seq ids, positions past max_blocks * block_size, or a
// needed table entry outside [0, n_blocks) throw Error(kInvalidArgument) before anything is
// written. The n_tokens, n_out, n_seqs, max_blocks, n_blocks and block_size dimensions are
// symbols bound per run (the executor re-plans activation memory when input shapes change from
// the previous run; only n_tokens and n_out size activations).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/blocks.h"
#include "engine/models/model_options.h"

namespace sampan::models {

struct Signature;  // model.h
class Model;       // model.h

struct LlamaLayerWeights {
  Tensor attn_norm;  // [hidden] f32
  AttentionWeights attn;
  Tensor ffn_norm;   // [hidden] f32
  Linear gate, up, down;
};

struct LlamaWeights {
  Tensor tok_embd;   // [vocab, hidden]; or GGUF blocks, u8 [vocab, row bytes] of tok_embd_type
  GgmlType tok_embd_type = GgmlType::kF32;
  std::vector<LlamaLayerWeights> layers;
  Tensor output_norm;  // [hidden] f32
  Linear output;       // lm_head [vocab, hidden] (the embedding table when tied)
  // Non-zero when the weights are Hadamard-rotated (llama_rotate.h): the block of the online
  // Walsh-Hadamard the graph applies before down_proj.
  int64_t down_hadamard_block = 0;
  // GGUF llama3-style RoPE: per channel pair, the divisor of the default inverse frequency
  // ([head_dim / 2] f32, llama.cpp's rope_freqs.weight); empty otherwise.
  std::vector<float> rope_freq_factors;
};

// Phase 2: every tensor the config implies, with its shape and dtype checked. Norm weights and
// biases (1-D, small) are converted to f32; matrices stay as mapped from the file. A quantized
// model directory (config.quant) loads its packed weights and scales as stored; `options` may
// rotate and quantize float weights on load (model_options.h).
LlamaWeights load_llama_weights(const HfConfig& config, const WeightStore& store,
                                const ModelBuildOptions& options = {});

// The graph of the input contract above. options.kv_cache_dtype sets the KV pools' format
// (k_cache.<l> / v_cache.<l> are [n_blocks, block_size, kv_dim] f32 for kF32, else
// [n_blocks, block_size, kv_row_bytes(...)] kI8 raw bytes); options.kv_hadamard adds the
// online transform on Q/K heads.
// `signature`, when given, receives the typed description of the contract above (model.h); the
// registry's builder (load_model) passes it, so runtimes bind inputs by role.
graph::Graph build_llama_graph(const HfConfig& config, const LlamaWeights& weights,
                               const ModelBuildOptions& options = {},
                               Signature* signature = nullptr);

// The weights a Llama-family decoder (formats "hf" and "gguf") was built from, for runtimes that
// build another graph over them (the trainer, train/lora_trainer.h); nullptr for any other model.
// They live as long as the model's builder_state.
const LlamaWeights* llama_weights_of(const Model& model);

}  // namespace sampan::models
