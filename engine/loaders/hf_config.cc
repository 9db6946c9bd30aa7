#include "engine/loaders/hf_config.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/mapped_file.h"
#include "engine/loaders/json_util.h"

namespace sampan {

using nlohmann::json;

const char* model_arch_name(ModelArch arch) {
  switch (arch) {
    case ModelArch::kLlama: return "LlamaForCausalLM";
    case ModelArch::kMistral: return "MistralForCausalLM";
    case ModelArch::kQwen2: return "Qwen2ForCausalLM";
  }
  return "?";
}

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kLlama3: return "llama3";
  }
  return "?";
}

namespace {

// Sizes are capped so that products of two of them (vocab x hidden, ...) stay far from int64
// overflow in every later computation.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
// transformers' MistralConfig and Qwen2Config default when config.json omits "sliding_window".
constexpr int64_t kDefaultSlidingWindow = 4096;
constexpr int64_t kQwen2DefaultMaxWindowLayers = 28;
constexpr int kMaxConfigDepth = 32;

// Typed access to one JSON object; every error names the file and the dotted key.
class Keys {
 public:
  Keys(const json& obj, const std::string& source, std::string prefix)
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  std::string key_name(std::string_view key) const {
    return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
  }
  // The value, or null when the key is absent or explicitly null (transformers treats both as
  // "use the default").
  const json* find(std::string_view key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  bool present(std::string_view key) const { return obj_.contains(key); }

  [[noreturn]] void missing(std::string_view key) const {
    fail(ErrorCode::kInvalidModel, "{}: key '{}' is missing", source_, key_name(key));
  }
  [[noreturn]] void wrong(std::string_view key, const json& v, std::string_view expected) const {
    fail(ErrorCode::kInvalidModel, "{}: key '{}' is {} ({}), expected {}", source_,
         key_name(key), json_kind(v), printable(v.dump(), 80), expected);
  }

  int64_t as_int(std::string_view key, const json& v) const {
    if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(kMaxSize)) {
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer() && !v.is_number_unsigned()) {
      const int64_t n = v.get<int64_t>();
      if (n >= -kMaxSize && n <= kMaxSize) return n;
    }
    wrong(key, v, fmt::format("an integer of magnitude at most {}", kMaxSize));
  }
  int64_t positive_int(std::string_view key, const json& v) const {
    const int64_t n = as_int(key, v);
    SAMPAN_CHECK(n > 0, ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected a positive value",
                 source_, key_name(key), n);
    return n;
  }
  int64_t req_positive_int(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) missing(key);
    return positive_int(key, *v);
  }
  int64_t opt_positive_int(std::string_view key, int64_t fallback) const {
    const json* v = find(key);
    return v ? positive_int(key, *v) : fallback;
  }
  double positive_number(std::string_view key, const json& v) const {
    if (!v.is_number()) wrong(key, v, "a number");
    const double d = v.get<double>();
    SAMPAN_CHECK(std::isfinite(d) && d > 0, ErrorCode::kInvalidModel,
                 "{}: key '{}' is {}, expected a positive value", source_, key_name(key), d);
    return d;
  }
  double req_positive_number(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) missing(key);
    return positive_number(key, *v);
  }
  double opt_positive_number(std::string_view key, double fallback) const {
    const json* v = find(key);
    return v ? positive_number(key, *v) : fallback;
  }
  bool opt_bool(std::string_view key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) wrong(key, *v, "true or false");
    return v->get<bool>();
  }
  std::optional<std::string> opt_string(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) wrong(key, *v, "a string");
    return v->get<std::string>();
  }
  int64_t token_id(std::string_view key, const json& v) const {
    const int64_t id = as_int(key, v);
    SAMPAN_CHECK(id >= 0, ErrorCode::kInvalidModel, "{}: key '{}' holds token id {}, expected >= 0",
                 source_, key_name(key), id);
    return id;
  }

  const std::string& source() const { return source_; }

 private:
  const json& obj_;
  const std::string& source_;
  std::string prefix_;
};

ModelArch parse_arch(const Keys& keys, std::string* model_type) {
  if (auto mt = keys.opt_string("model_type")) *model_type = *mt;
  const json* archs = keys.find("architectures");
  if (archs != nullptr) {
    if (!archs->is_array()) keys.wrong("architectures", *archs, "a list of class names");
    if (!archs->empty()) {
      const json& first = (*archs)[0];
      if (!first.is_string()) keys.wrong("architectures", *archs, "a list of class names");
      const auto& name = first.get_ref<const std::string&>();
      if (name == "LlamaForCausalLM") return ModelArch::kLlama;
      if (name == "MistralForCausalLM") return ModelArch::kMistral;
      if (name == "Qwen2ForCausalLM") return ModelArch::kQwen2;
      fail(ErrorCode::kUnsupported,
           "{}: unknown architecture '{}' (supported: LlamaForCausalLM, MistralForCausalLM, "
           "Qwen2ForCausalLM)",
           keys.source(), printable(name));
    }
  }
  SAMPAN_CHECK(!model_type->empty(), ErrorCode::kInvalidModel,
               "{}: key 'architectures' is missing and there is no 'model_type' either",
               keys.source());
  if (*model_type == "llama") return ModelArch::kLlama;
  if (*model_type == "mistral") return ModelArch::kMistral;
  if (*model_type == "qwen2") return ModelArch::kQwen2;
  fail(ErrorCode::kUnsupported, "{}: unknown model_type '{}' (supported: llama, mistral, qwen2)",
       keys.source(), printable(*model_type));
}

void check_partial_rotary(const Keys& keys) {
  const json* v = keys.find("partial_rotary_factor");
  if (v == nullptr) return;
  const double f = keys.positive_number("partial_rotary_factor", *v);
  SAMPAN_CHECK(f == 1.0, ErrorCode::kUnsupported,
               "{}: key '{}' is {}; partial rotary embeddings are not supported", keys.source(),
               keys.key_name("partial_rotary_factor"), f);
}

RopeScaling parse_rope(const Keys& top, int64_t max_positions) {
  RopeScaling rope;
  rope.theta = top.opt_positive_number("rope_theta", 10000.0);
  check_partial_rotary(top);

  const char* key = top.find("rope_scaling") ? "rope_scaling" : "rope_parameters";
  const json* params = top.find(key);
  if (params == nullptr) return rope;
  if (!params->is_object()) top.wrong(key, *params, "an object");
  for (const auto& [k, v] : params->items()) {
    SAMPAN_CHECK(!v.is_object(), ErrorCode::kUnsupported,
                 "{}: key '{}.{}' is an object; per-layer-type rope parameters are not supported",
                 top.source(), key, printable(k));
  }
  const Keys keys(*params, top.source(), key);
  rope.theta = keys.opt_positive_number("rope_theta", rope.theta);
  check_partial_rotary(keys);

  const char* type_key = keys.present("rope_type") ? "rope_type" : "type";
  const std::string type = keys.opt_string(type_key).value_or("default");
  if (type == "default") return rope;
  if (type == "linear") {
    rope.type = RopeType::kLinear;
    rope.factor = keys.req_positive_number("factor");
    return rope;
  }
  if (type == "llama3") {
    rope.type = RopeType::kLlama3;
    rope.factor = keys.req_positive_number("factor");
    rope.low_freq_factor = keys.req_positive_number("low_freq_factor");
    rope.high_freq_factor = keys.req_positive_number("high_freq_factor");
    rope.original_max_position_embeddings =
        keys.opt_positive_int("original_max_position_embeddings", max_positions);
    // The smoothing band divides by (high - low).
    SAMPAN_CHECK(rope.high_freq_factor > rope.low_freq_factor, ErrorCode::kInvalidModel,
                 "{}: key '{}' ({}) must exceed '{}' ({})", top.source(),
                 keys.key_name("high_freq_factor"), rope.high_freq_factor,
                 keys.key_name("low_freq_factor"), rope.low_freq_factor);
    return rope;
  }
  fail(ErrorCode::kUnsupported,
       "{}: rope type '{}' (key '{}') is not supported (supported: default, linear, llama3)",
       top.source(), printable(type), keys.key_name(type_key));
}

void parse_sliding_window(const Keys& keys, HfConfig* c) {
  c->layer_sliding.assign(static_cast<size_t>(c->n_layer), false);
  if (c->arch == ModelArch::kLlama) return;

  std::optional<int64_t> window;
  if (!keys.present("sliding_window")) {
    window = kDefaultSlidingWindow;
  } else if (keys.find("sliding_window") != nullptr) {
    window = keys.req_positive_int("sliding_window");
  }

  if (c->arch == ModelArch::kMistral) {
    if (window) c->layer_sliding.assign(c->layer_sliding.size(), true);
  } else {  // Qwen2
    if (!keys.opt_bool("use_sliding_window", false)) window.reset();
    if (window) {
      if (const json* types = keys.find("layer_types")) {
        if (!types->is_array() || static_cast<int64_t>(types->size()) != c->n_layer) {
          keys.wrong("layer_types", *types,
                     fmt::format("a list of {} layer types (num_hidden_layers)", c->n_layer));
        }
        for (size_t i = 0; i < types->size(); ++i) {
          const json& t = (*types)[i];
          if (t == "sliding_attention") {
            c->layer_sliding[i] = true;
          } else if (t != "full_attention") {
            keys.wrong("layer_types", t, "'full_attention' or 'sliding_attention'");
          }
        }
      } else {
        const json* mwl_v = keys.find("max_window_layers");
        const int64_t mwl = mwl_v ? keys.as_int("max_window_layers", *mwl_v)
                                  : kQwen2DefaultMaxWindowLayers;
        SAMPAN_CHECK(mwl >= 0, ErrorCode::kInvalidModel,
                     "{}: key 'max_window_layers' is {}, expected >= 0", keys.source(), mwl);
        for (int64_t i = mwl; i < c->n_layer; ++i) c->layer_sliding[static_cast<size_t>(i)] = true;
      }
    }
  }
  bool any = false;
  for (bool s : c->layer_sliding) any = any || s;
  if (window && any) c->sliding_window = window;
}

uint64_t seed_value(const Keys& keys, std::string_view key, const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  keys.wrong(key, v, "a non-negative integer");
}

// The "quantization_config" section written by `sampan quantize` (quant_method "sampan").
HfQuantConfig parse_quant(const Keys& top, const HfConfig& c) {
  const json& section = *top.find("quantization_config");
  if (!section.is_object()) top.wrong("quantization_config", section, "an object");
  const Keys keys(section, top.source(), "quantization_config");
  HfQuantConfig q;
  const auto format = keys.opt_string("format");
  if (!format) keys.missing("format");
  SAMPAN_CHECK(models::parse_weight_format(format->c_str(), &q.scheme.format),
               ErrorCode::kInvalidModel,
               "{}: key 'quantization_config.format' is '{}', expected none, fp8 or int4",
               top.source(), printable(*format));
  if (q.scheme.format == models::WeightFormat::kInt4) {
    q.scheme.group_size = keys.req_positive_int("group_size");
    SAMPAN_CHECK(int4_group_size_ok(q.scheme.group_size), ErrorCode::kInvalidModel,
                 "{}: key 'quantization_config.group_size' is {}, expected 32, 64 or 128",
                 top.source(), q.scheme.group_size);
    const json* sym = keys.find("symmetric");
    if (sym == nullptr) keys.missing("symmetric");
    q.scheme.symmetric = keys.opt_bool("symmetric", true);
    const auto sd = keys.opt_string("scale_dtype");
    if (!sd) keys.missing("scale_dtype");
    SAMPAN_CHECK(*sd == "f16" || *sd == "bf16", ErrorCode::kInvalidModel,
                 "{}: key 'quantization_config.scale_dtype' is '{}', expected f16 or bf16",
                 top.source(), printable(*sd));
    q.scheme.scale_dtype = *sd == "bf16" ? DType::kBF16 : DType::kF16;
  }
  if (const json* rot = keys.find("rotation")) {
    if (!rot->is_object()) keys.wrong("rotation", *rot, "an object");
    const Keys r(*rot, top.source(), "quantization_config.rotation");
    const auto method = r.opt_string("method");
    if (!method) r.missing("method");
    SAMPAN_CHECK(*method == "hadamard", ErrorCode::kInvalidModel,
                 "{}: key 'quantization_config.rotation.method' is '{}', expected hadamard",
                 top.source(), printable(*method));
    const json* seed = r.find("seed");
    if (seed == nullptr) r.missing("seed");
    q.rotation_seed = seed_value(r, "seed", *seed);
    q.down_hadamard_block = r.req_positive_int("down_proj_block");
    const int64_t b = q.down_hadamard_block;
    // The online transform is a block-diagonal Walsh-Hadamard over the down_proj input.
    SAMPAN_CHECK((b & (b - 1)) == 0 && c.intermediate_size % b == 0, ErrorCode::kInvalidModel,
                 "{}: key 'quantization_config.rotation.down_proj_block' is {}, expected a power "
                 "of two dividing intermediate_size ({})",
                 top.source(), b, c.intermediate_size);
    q.rotated = true;
  }
  return q;
}

}  // namespace

HfConfig parse_hf_config(std::string_view json_text, const std::string& source) {
  const json root = parse_json_strict(json_text, source, "config", kMaxConfigDepth);
  SAMPAN_CHECK(root.is_object(), ErrorCode::kInvalidModel, "{}: config is {}, expected an object",
               source, json_kind(root));
  const Keys keys(root, source, "");

  HfConfig c;
  c.source = source;
  c.arch = parse_arch(keys, &c.model_type);

  // Pre-quantised checkpoints of other tools (GPTQ, AWQ, FP8, ...) carry packed tensors under
  // other names; refuse them here with the reason rather than later as a missing tensor.
  bool sampan_quant = false;
  if (root.contains("quantization_config")) {
    const json& q = root["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? q["quant_method"].get<std::string>()
                                   : std::string("unknown");
    sampan_quant = method == "sampan";
    SAMPAN_CHECK(sampan_quant, ErrorCode::kUnsupported,
                 "{}: key 'quantization_config' (quant_method '{}'): pre-quantised checkpoints are "
                 "not supported yet; load the unquantised model",
                 source, printable(method));
  }

  const std::string act = keys.opt_string("hidden_act").value_or("silu");
  SAMPAN_CHECK(act == "silu", ErrorCode::kUnsupported,
               "{}: key 'hidden_act' is '{}'; only silu is supported", source, printable(act));

  c.vocab_size = keys.req_positive_int("vocab_size");
  c.hidden_size = keys.req_positive_int("hidden_size");
  c.intermediate_size = keys.req_positive_int("intermediate_size");
  c.n_layer = keys.req_positive_int("num_hidden_layers");
  c.n_head = keys.req_positive_int("num_attention_heads");
  c.n_head_kv = keys.opt_positive_int("num_key_value_heads", c.n_head);
  c.max_position_embeddings = keys.req_positive_int("max_position_embeddings");
  c.rms_norm_eps = keys.req_positive_number("rms_norm_eps");

  SAMPAN_CHECK(c.n_head % c.n_head_kv == 0, ErrorCode::kInvalidModel,
               "{}: key 'num_attention_heads' ({}) is not a multiple of 'num_key_value_heads' ({})",
               source, c.n_head, c.n_head_kv);
  if (keys.find("head_dim") != nullptr) {
    c.head_dim = keys.req_positive_int("head_dim");
  } else {
    SAMPAN_CHECK(c.hidden_size % c.n_head == 0, ErrorCode::kInvalidModel,
                 "{}: key 'hidden_size' ({}) is not a multiple of 'num_attention_heads' ({}) and "
                 "no 'head_dim' is given",
                 source, c.hidden_size, c.n_head);
    c.head_dim = c.hidden_size / c.n_head;
  }
  // RoPE rotates pairs of channels.
  SAMPAN_CHECK(c.head_dim % 2 == 0, ErrorCode::kInvalidModel,
               "{}: key 'head_dim' is {} (hidden_size / num_attention_heads when absent), expected "
               "an even value",
               source, c.head_dim);

  c.rope = parse_rope(keys, c.max_position_embeddings);
  c.tie_word_embeddings = keys.opt_bool("tie_word_embeddings", false);

  switch (c.arch) {
    case ModelArch::kLlama: {
      const bool attn = keys.opt_bool("attention_bias", false);
      c.bias_q = c.bias_k = c.bias_v = c.bias_o = attn;
      c.bias_mlp = keys.opt_bool("mlp_bias", false);
      break;
    }
    case ModelArch::kMistral:
      break;
    case ModelArch::kQwen2:
      c.bias_q = c.bias_k = c.bias_v = true;
      break;
  }
  parse_sliding_window(keys, &c);

  if (const json* bos = keys.find("bos_token_id")) {
    c.bos_token_id = keys.token_id("bos_token_id", *bos);
  }
  if (const json* eos = keys.find("eos_token_id")) {
    if (eos->is_array()) {
      for (const json& id : *eos) c.eos_token_ids.push_back(keys.token_id("eos_token_id", id));
    } else {
      c.eos_token_ids.push_back(keys.token_id("eos_token_id", *eos));
    }
  }

  if (sampan_quant) c.quant = parse_quant(keys, c);

  const char* dtype_key = keys.find("dtype") ? "dtype" : "torch_dtype";
  if (const auto name = keys.opt_string(dtype_key)) {
    c.dtype = parse_dtype(*name);
    SAMPAN_CHECK(c.dtype.has_value(), ErrorCode::kUnsupported,
                 "{}: key '{}' is '{}', which Sampan does not support", source, dtype_key,
                 printable(*name));
  }
  return c;
}

HfConfig load_hf_config(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file = (std::filesystem::path(path) / "config.json").string();
  }
  const auto mapped = MappedFile::open(file);
  const std::string_view text(reinterpret_cast<const char*>(mapped->data()), mapped->size());
  return parse_hf_config(text, file);
}

}  // namespace sampan
