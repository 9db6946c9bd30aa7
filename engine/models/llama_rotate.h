// QuaRot-style rotation of a Llama-family model's weights, in f32, exactly function-preserving
// (up to float rounding) when the graph applies the matching online transforms:
//
//  1. RMSNorm scales are folded into the linears that read the normalised rows (q/k/v into
//     attn_norm, gate/up into ffn_norm, lm_head into output_norm); the norms become all ones.
//  2. The residual stream is rotated by Q = D·Hb (D: random ±1 signs from `seed`; Hb: the
//     block-diagonal normalised Walsh-Hadamard of hadamard_block_for(hidden)): the embedding
//     rows become E·Q, the readers W·Q (q, k, v, gate, up, lm_head) and the writers Qᵀ·W
//     (o_proj, down_proj, and their biases). RMSNorm with unit weights commutes with Q.
//  3. V/O per head: v_proj rows of each KV head become H_hd·W_v (and its bias), o_proj columns
//     of each query head W_o·H_hd, so the V cache is stored rotated (helps a quantized V).
//  4. down_proj's input: W_down becomes W_down·H_fᵀ for the block-diagonal H_f over the
//     intermediate width (block hadamard_block_for(intermediate)); the graph must apply H_f
//     online to the activation before down_proj (weights.down_hadamard_block says the block).
// Tied embeddings are untied (lm_head gets its own matrix). Every rotated matrix becomes an
// owned f32 tensor. Throws Error(kInvalidArgument) if the weights are already rotated
// (down_hadamard_block != 0).
//
// `done`, when set, is called with each rotated linear as soon as its transforms are final
// (lm_head first, then per layer q, k, v, o, gate, up, down), named as in the checkpoint
// ("lm_head", "model.layers.3.self_attn.q_proj", "model.layers.3.mlp.down_proj"); it may
// replace the linear's weights (the loader quantizes them there), so that only one matrix is
// held in f32 at a time instead of the whole model. The work runs on `pool` (nullptr: a pool
// of its own).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/core/thread_pool.h"
#include "engine/loaders/hf_config.h"
#include "engine/models/llama.h"

namespace sampan::models {

using RotatedLinearFn = std::function<void(Linear&, const std::string& name)>;

void rotate_llama_weights(const HfConfig& config, LlamaWeights& weights, uint64_t seed,
                          const RotatedLinearFn& done = {}, ThreadPool* pool = nullptr);

}  // namespace sampan::models
