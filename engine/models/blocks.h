// Building blocks shared by the decoder-only architectures (Llama, Mistral, Qwen2, ...): each
// appends the nodes of one sub-layer to a graph. An architecture file composes them; adding an
// architecture is choosing blocks and tensor names, not writing a new engine.
#pragma once

#include <array>
#include <string>

#include "engine/core/tensor.h"
#include "engine/graph/graph.h"
#include "engine/models/lora_adapter.h"
#include "kernels/common/ggml_type.h"
#include "kernels/common/kv_format.h"

namespace sampan::models {

using graph::Graph;
using graph::ValueId;

struct Linear {
  // [out_features, in_features] f32|f16|bf16 (usually mmapped), or quantized (quant/quantize.h):
  // kF8E4M3, or kI4 packed two per byte.
  Tensor weight;
  Tensor bias;    // [out_features] f32, or undefined
  Tensor scales;  // quantized only: fp8 [out] f32; int4 [out, in / group_size] f16|bf16
  Tensor zeros;   // int4 asymmetric only: [out, in / group_size] i8
  int64_t group_size = 0;  // int4 only
  // GGUF block weights: weight is u8 [out, ggml_row_bytes(ggml_type, in)] (kernels/common/
  // ggml_type.h), no scales or zeros.
  GgmlType ggml_type = GgmlType::kF32;
};

struct AttentionWeights {
  Linear q, k, v, o;
};

struct AttentionParams {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  double scale = 0;
  int64_t sliding_window = 0;  // 0: none
  double rope_attn_factor = 1.0;
  KvDtype kv_dtype = KvDtype::kF32;  // format of the KV pools (attention "kv_dtype")
  // Online Walsh-Hadamard on every Q and K head after RoPE (q·k unchanged; K cached rotated).
  bool qk_hadamard = false;
};

// The LoRA adapters of one projection stacked for the `lora` op (engine/ops/lora.cc), ranks
// zero-padded to the largest.
struct LoraStack {
  Tensor a;      // [n_adapters, r_max, in] f32
  Tensor b;      // [n_adapters, out, r_max] f32
  Tensor scale;  // [n_adapters] f32; 0 where that adapter does not target the projection
  bool defined() const { return a.defined() && a.numel() > 0; }
};

// The adapters of one decoder layer, by kLoraModules index (q, k, v, o, gate, up, down; an
// undefined stack: no adapter targets it), and the graph input choosing one per token.
struct LayerLora {
  ValueId ids = graph::kNoValue;  // [n_tokens] i32, -1: the base alone
  std::array<LoraStack, kLoraModuleCount> modules;
};

// Inputs every decoder layer reads.
struct DecoderInputs {
  ValueId positions = graph::kNoValue;  // [n_tokens] i32
  ValueId seq_ids = graph::kNoValue;    // [n_tokens] i32, rows of block_tables
  ValueId block_tables = graph::kNoValue;  // [n_seqs, max_blocks] i32 (paged KV cache)
  ValueId inv_freq = graph::kNoValue;   // [head_dim/2] f32 (RoPE, scaling applied)
};

// The linear op's fixed input slots for x and w (x, weight, bias, scales, zeros: absent ones
// kNoValue, the weight's tensors added as constants named after `name`) and its attributes for
// w's format. `linear` below uses them; so does the training graph's fused LM head.
std::vector<ValueId> linear_slots(Graph& g, const std::string& name, ValueId x, const Linear& w);
graph::Attributes linear_attrs(const Linear& w);

// x: [n_tokens, in] -> [n_tokens, out]. With `lora` (defined) the projection's output goes
// through a `lora` node reading x and `lora_ids` ([n_tokens] i32).
ValueId linear(Graph& g, const std::string& name, ValueId x, const Linear& w,
               const LoraStack* lora = nullptr, ValueId lora_ids = graph::kNoValue);

// x: [n_tokens, dim] -> [n_tokens, dim]; weight: [dim]
ValueId rms_norm(Graph& g, const std::string& name, ValueId x, const Tensor& weight, double eps);

// Self-attention with RoPE over a paged KV cache. x: [n_tokens, hidden] -> [n_tokens, hidden].
// k_cache, v_cache: graph inputs [n_blocks, block_size, n_kv_heads * head_dim].
ValueId attention(Graph& g, const std::string& name, ValueId x, const AttentionWeights& w,
                  const AttentionParams& p, const DecoderInputs& in, ValueId k_cache,
                  ValueId v_cache, const LayerLora* lora = nullptr);

// SwiGLU feed-forward: down(silu(gate(x)) * up(x)). x: [n_tokens, hidden] -> [n_tokens, hidden].
// down_hadamard_block > 0 (rotated weights, llama_rotate.h): the online Walsh-Hadamard of that
// block on down_proj's input. The gate/up fusion still applies (it reads the silu_mul output);
// it skips a gate/up pair whose outputs go through `lora` nodes (`lora`: the layer's adapters).
ValueId swiglu_ffn(Graph& g, const std::string& name, ValueId x, const Linear& gate,
                   const Linear& up, const Linear& down, int64_t down_hadamard_block = 0,
                   const LayerLora* lora = nullptr);

}  // namespace sampan::models
