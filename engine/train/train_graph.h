// The training graph of a Llama-family decoder with LoRA adapters (train/lora_trainer.h): the
// forward of llama.h in a non-paged form (whole padded sequences, causal_attention instead of the
// paged KV-cache attention, no logit-row selection), the summed token cross-entropy, and, when
// asked, the backward from autograd.h with the gradient of every adapter matrix as an output.
//
// Inputs (B sequences of T rows each, row b * T + t; n_rows = B * T and batch = B are symbols):
//   "ids"          [n_rows] i32   token ids (padding rows: any valid id)
//   "positions"    [n_rows] i32   position of each row in its sequence (t)
//   "lengths"      [batch] i32    real tokens of each sequence; later rows are padding
//   "targets"      [n_rows] i32   the token that should follow, or -100 (no loss)
//   "dropout_seed" [2] i32        low and high halves of this micro-batch's dropout seed
//   "lora.<layer>.<module>.A" [r, in] f32 and ".B" [out, r] f32 for every targeted projection
// Outputs: 0 the summed loss [1] f32; then, with backward, one gradient per LoRA input in the
// order of TrainGraph::params.
// A targeted projection computes y = x·Wᵀ (+ bias) + (dropout(x) · s)·Aᵀ·Bᵀ, s = lora.scale():
// peft's LoRA with the scale moved onto the branch input (the same function).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/loaders/hf_config.h"
#include "engine/models/llama.h"
#include "engine/models/lora_adapter.h"

namespace sampan::train {

struct LoraParam {
  int64_t layer = 0;
  int module = 0;     // index in models::kLoraModules
  char matrix = 'A';  // 'A' or 'B'
  std::string input;  // graph input name
  graph::ValueId value = graph::kNoValue;
  graph::ValueId grad = graph::kNoValue;  // with backward: its gradient (a graph output)
};

struct TrainGraph {
  graph::Graph graph;
  graph::ValueId loss = graph::kNoValue;
  std::vector<LoraParam> params;  // layer-major, module order, A before B
};

struct TrainGraphOptions {
  double dropout = 0;    // on the LoRA branch input; 0 for evaluation
  bool backward = true;  // append the backward and the gradient outputs
  // Recompute each layer's forward in the backward (autograd.h, BackwardOptions): only the
  // layers' inputs stay alive from the forward; gradients are bit-identical.
  bool recompute = false;
  // Every projection GEMM (base, LoRA, lm_head; forward and backward) on bf16-rounded operands
  // with f32 sums and f32 results: round_bf16 on its input, on LoRA's A, B, scaled input and
  // rank-r intermediate, and round_grad_bf16 on its output (a view: the identity, whose gradient
  // rule rounds the incoming gradient). Base weights are used as stored (bf16 in most
  // checkpoints). The attention's products likewise (causal_attention's bf16_products).
  bool bf16 = false;
  // With bf16: drop roundings that repeat another's (the same input), after the backward is
  // built; results are the same bits (train_graph.cc says why). Off only to check that.
  bool merge_roundings = true;
  // With bf16: fold roundings read only by GEMMs into those GEMMs (linear's round_x_bf16,
  // linear_grad_input's round_dy_bf16); the same bits. Off only to check that.
  bool fold_roundings = true;
};

// `lora` says the rank, scale and targets (names from kLoraModules). Errors are one line: a
// target name outside kLoraModules or no target, a rank <= 0, layer weights that do not match the
// config (Error(kInvalidArgument)); rope_freq_factors of the wrong length (kInvalidModel). Any
// weight format the linear op takes is a valid base (its input gradient dequantizes it).
TrainGraph build_train_graph(const HfConfig& config, const models::LlamaWeights& weights,
                             const models::LoraConfig& lora, const TrainGraphOptions& options);

}  // namespace sampan::train
