// LoRA adapters (Hu et al. 2021) in PEFT's on-disk format: what `sampan finetune` writes, what
// `--lora DIR` and `serve --lora NAME=DIR` load, and what a graph takes as inputs so one Model
// serves the base and any number of adapters (ARCHITECTURE.md: "served by the same Model with
// the adapter as an input").
//
// On disk (a directory, exactly as peft's save_pretrained writes it):
//   adapter_config.json        peft_type "LORA", r, lora_alpha, lora_dropout, target_modules,
//                              bias "none", task_type "CAUSAL_LM", base_model_name_or_path,
//                              use_rslora (optional, default false)
//   adapter_model.safetensors  base_model.model.model.layers.<l>.self_attn.{q,k,v,o}_proj.
//                              lora_{A,B}.weight and ...mlp.{gate,up,down}_proj.lora_{A,B}.weight:
//                              A [r, in], B [out, r] (f32, f16 or bf16 on load; f32 when saved)
// The delta a targeted projection adds: y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with s = alpha / r (alpha /
// sqrt(r) with use_rslora).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/loaders/hf_config.h"

namespace sampan::models {

// The projections an adapter may target, by PEFT's module names; the index of a name here is
// its slot in LoraLayer.
inline constexpr int kLoraModuleCount = 7;
inline constexpr std::array<const char*, kLoraModuleCount> kLoraModules = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
// Index of `module` in kLoraModules, or -1.
int lora_module_index(const std::string& module);
// [in, out] features of module `index` of a decoder with `config`.
std::array<int64_t, 2> lora_module_shape(const HfConfig& config, int index);

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0.0;   // training only; recorded in adapter_config.json
  bool use_rslora = false;
  std::vector<std::string> targets;  // names from kLoraModules, each once
  std::string base_model;            // base_model_name_or_path
  double scale() const;              // alpha / rank, or alpha / sqrt(rank) with use_rslora
};

struct LoraPair {
  Tensor a;  // [rank, in] f32, contiguous
  Tensor b;  // [out, rank] f32, contiguous
  bool defined() const { return a.defined() && a.numel() > 0; }
};

struct LoraAdapter {
  std::string name;  // what requests call it (serve --lora NAME=DIR); the directory otherwise
  std::string dir;   // where it was loaded from (messages); empty for one made in memory
  LoraConfig config;
  // By layer, then by kLoraModules index; a pair that is not targeted is left undefined.
  std::vector<std::array<LoraPair, kLoraModuleCount>> layers;
};

// Reads a PEFT LoRA directory. Every problem is Error(kInvalidArgument) with one line naming the
// file and the key or tensor: missing files, peft_type other than LORA, bias other than "none",
// DoRA / modules_to_save / layers_to_transform / rank_pattern / alpha_pattern (not supported), a
// target module outside kLoraModules, a tensor name that is not a LoRA A/B of a known module, A
// and B of one module missing its partner, ranks that differ from r. Shapes against a base model
// are check_lora_adapter's.
LoraAdapter load_lora_adapter(const std::string& dir);

// Checks that `adapter` fits a base with `config`: layer count and every A [r, in] / B [out, r]
// shape. A mismatch is one line naming the adapter, the tensor and both shapes, e.g.
// "adapter 'x': base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight is [8, 64] but the
// base model needs [8, 128]".
void check_lora_adapter(const LoraAdapter& adapter, const HfConfig& config);

// A new adapter for a base with `config`, initialised as PEFT does: A ~ kaiming-uniform
// (a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), from `seed`; B = 0.
LoraAdapter make_lora_adapter(const LoraConfig& lora, const HfConfig& config, uint64_t seed);

// Writes adapter_config.json and adapter_model.safetensors (f32) into `dir` (created if needed),
// loadable by peft's PeftModel.from_pretrained as is. Files are written to temporaries and
// renamed, so a crash never leaves a half-written adapter.
void save_lora_adapter(const LoraAdapter& adapter, const std::string& dir);

// PEFT's tensor name of layer `layer`, module `index`, matrix 'A' or 'B'.
std::string lora_tensor_name(int64_t layer, int index, char matrix);
// The base model's weight that pair (layer, index) adapts, e.g.
// "model.layers.<l>.self_attn.q_proj.weight".
std::string lora_base_weight_name(int64_t layer, int index);

// W + scale · B·A for a projection's weight `weight` ([out, in] f32, f16 or bf16) and the pair
// adapting it (A [r, in], B [out, r]), rounded once to weight's dtype: what `sampan merge-lora`
// writes. The sum is formed in f32 (r products per element). Other dtypes or shapes that do not
// fit are Error(kInvalidArgument) naming `name`.
Tensor merge_lora_weight(const Tensor& weight, const LoraPair& pair, double scale,
                         const std::string& name);

}  // namespace sampan::models
