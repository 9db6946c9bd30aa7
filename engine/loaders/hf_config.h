// HfConfig: a Hugging Face config.json for the Llama-family decoders Sampan runs.
//
// Supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (from architectures[0], or
// from model_type llama / mistral / qwen2 when architectures is absent). Defaults follow
// transformers where config.json may leave a key out; the sizes a model cannot be built without
// are required.
//
// Attention biases: Llama's attention_bias biases q, k, v and o; Qwen2 always biases q, k, v and
// never o; Mistral has none. Only Llama reads mlp_bias.
//
// Sliding-window attention, as transformers applies it:
//   Mistral: "sliding_window" (int) on every layer; null means none; an absent key means 4096
//            (transformers' MistralConfig default).
//   Qwen2:   only when "use_sliding_window" is true and "sliding_window" is an int. Then layer i
//            uses the window when i >= "max_window_layers" (default 28): the FIRST
//            max_window_layers layers use full attention. An explicit "layer_types" list
//            ("full_attention" / "sliding_attention" per layer) overrides that rule.
//   Llama:   none.
//
// RoPE comes from "rope_scaling" (legacy; "rope_type" or the older "type") or "rope_parameters"
// (newer transformers; may also carry rope_theta, which then wins over the top-level key). When
// both are present rope_scaling wins, as in transformers. Types: default, linear (factor),
// llama3 (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings, the last
// defaulting to max_position_embeddings). yarn, dynamic, longrope and any other type are
// Error(kUnsupported) naming the type; so is partial_rotary_factor != 1.
//
// A model directory written by `sampan quantize` carries "quantization_config" with
// "quant_method": "sampan" (HfQuantConfig below); every other quant_method (gptq, awq, fp8, ...)
// is Error(kUnsupported). The section:
//   "format": "none" | "fp8" | "int4"            (required)
//   "group_size": 32 | 64 | 128, "symmetric": bool, "scale_dtype": "f16" | "bf16"   (int4 only,
//                                                 all required then)
//   "rotation": {"method": "hadamard", "seed": N, "down_proj_block": B}   (optional; B a power of
//                                                 two dividing intermediate_size)
//
// Errors are one line naming the file and the key: kInvalidModel for malformed or inconsistent
// values (missing, wrong type, non-positive, heads not dividing), kUnsupported for a valid
// config Sampan cannot run (architecture, hidden_act other than silu, rope type).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/models/model_options.h"

namespace sampan {

enum class ModelArch { kLlama, kMistral, kQwen2 };

// "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM".
const char* model_arch_name(ModelArch arch);

enum class RopeType { kDefault, kLinear, kLlama3 };

const char* rope_type_name(RopeType type);  // "default", "linear", "llama3"

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;            // linear, llama3
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;  // llama3
};

// What `sampan quantize` did to a model directory ("quantization_config", quant_method "sampan").
// Linears stored quantized: every one for fp8; for int4 those whose input width is a multiple of
// the group size (the others keep their float weights).
struct HfQuantConfig {
  models::QuantScheme scheme;       // format kNone: float weights (rotated only)
  bool rotated = false;             // Hadamard-rotated (models/llama_rotate.h)
  uint64_t rotation_seed = 0;
  int64_t down_hadamard_block = 0;  // rotated only: block of the online transform before down_proj
};

struct HfConfig {
  std::string source;  // the file it came from, for messages
  ModelArch arch = ModelArch::kLlama;
  std::string model_type;  // as written; may be empty

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // may differ from hidden_size / n_head (Mistral Nemo: 128 vs 160)
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 0.0;
  RopeScaling rope;

  bool tie_word_embeddings = false;
  bool bias_q = false;
  bool bias_k = false;
  bool bias_v = false;
  bool bias_o = false;
  bool bias_mlp = false;  // gate, up and down projections

  // Window size in tokens when at least one layer uses sliding-window attention.
  std::optional<int64_t> sliding_window;
  // n_layer entries; true where that layer uses the window. All false when sliding_window is
  // empty.
  std::vector<bool> layer_sliding;

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // empty when the config names none
  // "dtype" (newer transformers) or "torch_dtype"; empty when absent.
  std::optional<DType> dtype;
  // Set for a directory written by `sampan quantize`.
  std::optional<HfQuantConfig> quant;

  int64_t q_dim() const { return n_head * head_dim; }     // width of the q projection
  int64_t kv_dim() const { return n_head_kv * head_dim; }  // width of each of k and v
  bool layer_is_sliding(int64_t layer) const {
    return sliding_window.has_value() && layer_sliding[static_cast<size_t>(layer)];
  }
};

// Reads and parses `path`: a config.json, or a directory holding one.
HfConfig load_hf_config(const std::string& path);

// Parses config text; `source` names it in error messages.
HfConfig parse_hf_config(std::string_view json_text, const std::string& source);

}  // namespace sampan
