#include "engine/models/lora_adapter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "engine/core/error.h"
#include "engine/loaders/json_util.h"
#include "engine/loaders/safetensors.h"
#include "engine/loaders/safetensors_writer.h"
#include "kernels/common/half.h"

namespace sampan::models {

using nlohmann::json;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr const char* kTensorPrefix = "base_model.model.model.layers.";
constexpr int kMaxConfigDepth = 32;
// Far beyond any real adapter; keeps a hostile config from asking for absurd allocations.
constexpr int64_t kMaxRank = 1 << 16;
constexpr int64_t kMaxLayers = 1 << 16;

// The sub-module of a decoder layer that holds module `index` (PEFT's module path).
const char* module_parent(int index) { return index <= 3 ? "self_attn" : "mlp"; }

std::string path_in(const std::string& dir, const char* file) {
  return (std::filesystem::path(dir) / file).string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kNotFound, "{}: cannot open (missing file?)", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Why a JSON value is "set" for a key PEFT leaves null / empty / false when unused.
bool is_set(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_object() || v.is_array() || v.is_string()) return !v.empty();
  return true;
}

// Typed reads of adapter_config.json; every error names the file and the key.
class ConfigReader {
 public:
  ConfigReader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  const json* find(const char* key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  const json& required(const char* key) const {
    const json* v = find(key);
    SAMPAN_CHECK(v != nullptr && !v->is_null(), ErrorCode::kInvalidArgument,
                 "{}: key '{}' is missing", path_, key);
    return *v;
  }
  [[noreturn]] void wrong(const char* key, const json& v, const char* expected) const {
    fail(ErrorCode::kInvalidArgument, "{}: key '{}' is {} ({}), expected {}", path_, key,
         json_kind(v), printable(v.dump(), 80), expected);
  }
  std::string string(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_string()) wrong(key, *v, "a string");
    return v->get<std::string>();
  }
  double number(const char* key, std::optional<double> fallback) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) {
      if (fallback) return *fallback;
      required(key);
    }
    if (!v->is_number()) wrong(key, *v, "a number");
    return v->get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) wrong(key, *v, "true or false");
    return v->get<bool>();
  }
  // A key PEFT offers that Sampan does not implement: must be absent, null, false or empty.
  void unsupported(const char* key, const char* what) const {
    const json* v = find(key);
    SAMPAN_CHECK(v == nullptr || !is_set(*v), ErrorCode::kInvalidArgument,
                 "{}: key '{}' is {}: {} is not supported", path_, key,
                 printable(v ? v->dump() : "", 80), what);
  }
  const std::string& path() const { return path_; }

 private:
  const json& obj_;
  std::string path_;
};

std::vector<std::string> parse_targets(const ConfigReader& r) {
  const json& v = r.required("target_modules");
  std::vector<std::string> names;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    // PEFT's shorthand for every linear but the output layer; any other string is a regex.
    if (s == "all-linear") {
      for (const char* m : kLoraModules) names.emplace_back(m);
      return names;
    }
    SAMPAN_CHECK(lora_module_index(s) >= 0, ErrorCode::kInvalidArgument,
                 "{}: key 'target_modules' is the pattern '{}': only a list of module names "
                 "(or one name, or \"all-linear\") is supported",
                 r.path(), printable(s, 80));
    return {s};
  }
  if (!v.is_array() || v.empty()) r.wrong("target_modules", v, "a non-empty list of module names");
  for (const json& e : v) {
    if (!e.is_string()) r.wrong("target_modules", v, "a list of strings");
    names.push_back(e.get<std::string>());
  }
  return names;
}

// The module names of `targets`, checked: known and each once. `where` prefixes messages.
void check_targets(const std::vector<std::string>& targets, const std::string& where) {
  SAMPAN_CHECK(!targets.empty(), ErrorCode::kInvalidArgument, "{}: no target modules", where);
  std::array<bool, kLoraModuleCount> seen{};
  for (const std::string& t : targets) {
    const int i = lora_module_index(t);
    SAMPAN_CHECK(i >= 0, ErrorCode::kInvalidArgument,
                 "{}: target module '{}' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, "
                 "up_proj, down_proj",
                 where, printable(t, 80));
    SAMPAN_CHECK(!seen[static_cast<size_t>(i)], ErrorCode::kInvalidArgument,
                 "{}: target module '{}' is listed twice", where, t);
    seen[static_cast<size_t>(i)] = true;
  }
}

LoraConfig parse_config(const std::string& path) {
  const json j = parse_json_strict(read_text(path), path, "adapter_config.json", kMaxConfigDepth);
  SAMPAN_CHECK(j.is_object(), ErrorCode::kInvalidArgument, "{}: expected a JSON object, got {}",
               path, json_kind(j));
  const ConfigReader r(j, path);
  r.required("peft_type");
  const std::string peft_type = r.string("peft_type", "");
  SAMPAN_CHECK(peft_type == "LORA", ErrorCode::kInvalidArgument,
               "{}: key 'peft_type' is '{}', expected \"LORA\"", path, printable(peft_type, 40));
  const std::string bias = r.string("bias", "none");
  SAMPAN_CHECK(bias == "none", ErrorCode::kInvalidArgument,
               "{}: key 'bias' is '{}': only \"none\" is supported", path, printable(bias, 40));
  r.unsupported("use_dora", "DoRA");
  r.unsupported("modules_to_save", "training extra modules");
  r.unsupported("layers_to_transform", "adapting a subset of layers");
  r.unsupported("rank_pattern", "a rank per module");
  r.unsupported("alpha_pattern", "an alpha per module");
  r.unsupported("fan_in_fan_out", "transposed (Conv1D) weights");
  // Variants that change what the adapter computes (newer peft versions write each key, unset).
  r.unsupported("lora_bias", "a trained LoRA bias");
  r.unsupported("use_qalora", "QALoRA");
  r.unsupported("use_bdlora", "block-diagonal LoRA");
  r.unsupported("alora_invocation_tokens", "activated LoRA");
  r.unsupported("arrow_config", "Arrow routing");
  r.unsupported("layer_replication", "layer replication");
  r.unsupported("exclude_modules", "excluding modules");
  r.unsupported("target_parameters", "targeting parameters");
  r.unsupported("trainable_token_indices", "trainable tokens");
  // These initialisations also rewrite the base weights; the adapter is only right on top of
  // that modified base (peft converts it to a plain LoRA when asked at save time).
  if (const json* init = r.find("init_lora_weights"); init != nullptr && init->is_string()) {
    const std::string v = init->get<std::string>();
    for (const char* method : {"pissa", "olora", "corda", "loftq"}) {
      SAMPAN_CHECK(v.rfind(method, 0) != 0, ErrorCode::kInvalidArgument,
                   "{}: key 'init_lora_weights' is '{}': this adapter needs the base weights {} "
                   "rewrote (save it converted to a plain LoRA)",
                   path, printable(v, 40), method);
    }
  }
  LoraConfig c;
  const double rank = r.number("r", std::nullopt);
  SAMPAN_CHECK(rank >= 1 && rank <= kMaxRank && rank == std::floor(rank),
               ErrorCode::kInvalidArgument, "{}: key 'r' is {}, expected an integer in 1..{}", path,
               rank, kMaxRank);
  c.rank = static_cast<int64_t>(rank);
  c.alpha = r.number("lora_alpha", 8.0);  // PEFT's default
  SAMPAN_CHECK(std::isfinite(c.alpha), ErrorCode::kInvalidArgument,
               "{}: key 'lora_alpha' is not finite", path);
  c.dropout = r.number("lora_dropout", 0.0);
  c.use_rslora = r.boolean("use_rslora", false);
  c.base_model = r.string("base_model_name_or_path", "");
  c.targets = parse_targets(r);
  check_targets(c.targets, path + ": key 'target_modules'");
  return c;
}

// A tensor name parsed back into (layer, module, matrix); nullopt when it is not one of ours.
struct TensorKey {
  int64_t layer;
  int module;
  char matrix;
};
std::optional<TensorKey> parse_tensor_name(const std::string& name) {
  const std::string prefix = kTensorPrefix;
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  size_t p = prefix.size(), digits = 0;
  int64_t layer = 0;
  while (p < name.size() && std::isdigit(static_cast<unsigned char>(name[p])) && digits < 6) {
    layer = layer * 10 + (name[p++] - '0');
    ++digits;
  }
  if (digits == 0 || p >= name.size() || name[p] != '.') return std::nullopt;
  for (int m = 0; m < kLoraModuleCount; ++m) {
    for (char matrix : {'A', 'B'}) {
      if (name == lora_tensor_name(layer, m, matrix)) return TensorKey{layer, m, matrix};
    }
  }
  return std::nullopt;
}

// `name` of `file` as a contiguous f32 tensor; float dtypes only.
Tensor load_f32(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsTensorInfo& info = file.info(name);
  SAMPAN_CHECK(info.dtype == DType::kF32 || info.dtype == DType::kF16 || info.dtype == DType::kBF16,
               ErrorCode::kInvalidArgument, "{}: tensor '{}' is {}, expected F32, F16 or BF16",
               file.path(), name, dtype_safetensors_name(info.dtype));
  SAMPAN_CHECK(info.shape.size() == 2, ErrorCode::kInvalidArgument,
               "{}: tensor '{}' has shape {}, expected a matrix", file.path(), name,
               shape_str(info.shape));
  return file.get(name).to_f32();
}

SafetensorsFile open_weights(const std::string& path) {
  SAMPAN_CHECK(std::filesystem::is_regular_file(path), ErrorCode::kInvalidArgument,
               "{}: file is missing", path);
  return SafetensorsFile::open(path);
}

std::string json_text(const LoraAdapter& a) {
  const LoraConfig& c = a.config;
  // The keys PEFT's LoraConfig writes (those Sampan has no use for at their defaults), so that
  // PeftModel.from_pretrained reads the file as one of its own.
  json j = {
      {"alpha_pattern", json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path", c.base_model.empty() ? json(nullptr) : json(c.base_model)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layer_replication", nullptr},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"lora_alpha", c.alpha},
      {"lora_dropout", c.dropout},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", c.rank},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", c.targets},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", false},
      {"use_rslora", c.use_rslora},
  };
  // An integral alpha is written as an integer, as PEFT's configs usually hold it.
  if (c.alpha == std::floor(c.alpha) && std::fabs(c.alpha) < 1e15) {
    j["lora_alpha"] = static_cast<int64_t>(c.alpha);
  }
  return j.dump(2) + "\n";
}

}  // namespace

int lora_module_index(const std::string& module) {
  for (int i = 0; i < kLoraModuleCount; ++i) {
    if (module == kLoraModules[static_cast<size_t>(i)]) return i;
  }
  return -1;
}

std::array<int64_t, 2> lora_module_shape(const HfConfig& c, int index) {
  switch (index) {
    case 0: return {c.hidden_size, c.q_dim()};
    case 1:
    case 2: return {c.hidden_size, c.kv_dim()};
    case 3: return {c.q_dim(), c.hidden_size};
    case 4:
    case 5: return {c.hidden_size, c.intermediate_size};
    case 6: return {c.intermediate_size, c.hidden_size};
    default: break;
  }
  fail(ErrorCode::kInternal, "LoRA module index {} outside 0..{}", index, kLoraModuleCount - 1);
}

double LoraConfig::scale() const {
  const double r = static_cast<double>(rank);
  return use_rslora ? alpha / std::sqrt(r) : alpha / r;
}

std::string lora_tensor_name(int64_t layer, int index, char matrix) {
  return fmt::format("{}{}.{}.{}.lora_{}.weight", kTensorPrefix, layer, module_parent(index),
                     kLoraModules[static_cast<size_t>(index)], matrix);
}

std::string lora_base_weight_name(int64_t layer, int index) {
  return fmt::format("model.layers.{}.{}.{}.weight", layer, module_parent(index),
                     kLoraModules[static_cast<size_t>(index)]);
}

Tensor merge_lora_weight(const Tensor& weight, const LoraPair& pair, double scale,
                         const std::string& name) {
  const DType dt = weight.dtype();
  SAMPAN_CHECK(dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16,
               ErrorCode::kInvalidArgument,
               "{}: weight is {}; merging a LoRA adapter needs f32, f16 or bf16 weights", name,
               dtype_name(dt));
  SAMPAN_CHECK(weight.rank() == 2 && pair.defined(), ErrorCode::kInvalidArgument,
               "{}: no LoRA pair or not a matrix", name);
  const int64_t out = weight.dim(0), in = weight.dim(1), r = pair.a.dim(0);
  SAMPAN_CHECK(pair.a.shape() == (Shape{r, in}) && pair.b.shape() == (Shape{out, r}),
               ErrorCode::kInvalidArgument, "{}: weight {} does not fit LoRA A {} and B {}", name,
               shape_str(weight.shape()), shape_str(pair.a.shape()), shape_str(pair.b.shape()));
  const Tensor w = weight.to_f32();
  const Tensor a = pair.a.to_f32(), b = pair.b.to_f32();
  Tensor merged = Tensor::empty({out, in}, dt);
  std::vector<float> row(static_cast<size_t>(in));
  const float s = static_cast<float>(scale);
  for (int64_t o = 0; o < out; ++o) {
    const float* wr = w.data<float>() + o * in;
    std::copy(wr, wr + in, row.begin());
    for (int64_t j = 0; j < r; ++j) {
      const float c = s * b.data<float>()[o * r + j];
      const float* ar = a.data<float>() + j * in;
      for (int64_t i = 0; i < in; ++i) row[static_cast<size_t>(i)] += c * ar[i];
    }
    switch (dt) {
      case DType::kF32:
        std::copy(row.begin(), row.end(), merged.data<float>() + o * in);
        break;
      case DType::kF16:
        for (int64_t i = 0; i < in; ++i) {
          merged.data<uint16_t>()[o * in + i] = f32_to_f16(row[static_cast<size_t>(i)]);
        }
        break;
      default:
        for (int64_t i = 0; i < in; ++i) {
          merged.data<uint16_t>()[o * in + i] = f32_to_bf16(row[static_cast<size_t>(i)]);
        }
        break;
    }
  }
  return merged;
}

namespace {

LoraAdapter read_adapter(const std::string& dir) {
  SAMPAN_CHECK(std::filesystem::is_directory(dir), ErrorCode::kNotFound,
               "{}: LoRA adapter directory does not exist", dir);
  LoraAdapter a;
  a.name = dir;
  a.dir = dir;
  a.config = parse_config(path_in(dir, kConfigFile));
  std::array<bool, kLoraModuleCount> targeted{};
  for (const std::string& t : a.config.targets) {
    targeted[static_cast<size_t>(lora_module_index(t))] = true;
  }

  const SafetensorsFile file = open_weights(path_in(dir, kWeightsFile));
  const std::string& path = file.path();
  const int64_t r = a.config.rank;
  for (const std::string& name : file.names()) {
    const std::optional<TensorKey> key = parse_tensor_name(name);
    SAMPAN_CHECK(key.has_value(), ErrorCode::kInvalidArgument,
                 "{}: tensor '{}' is not the lora_A or lora_B weight of a q/k/v/o/gate/up/down "
                 "projection",
                 path, printable(name, 120));
    SAMPAN_CHECK(targeted[static_cast<size_t>(key->module)], ErrorCode::kInvalidArgument,
                 "{}: tensor '{}' is for module '{}', which target_modules does not list", path,
                 name, kLoraModules[static_cast<size_t>(key->module)]);
    SAMPAN_CHECK(key->layer < kMaxLayers, ErrorCode::kInvalidArgument,
                 "{}: tensor '{}' names layer {} (at most {})", path, name, key->layer, kMaxLayers);
    if (static_cast<int64_t>(a.layers.size()) <= key->layer) {
      a.layers.resize(static_cast<size_t>(key->layer + 1));
    }
    Tensor t = load_f32(file, name);
    const int64_t rank = key->matrix == 'A' ? t.dim(0) : t.dim(1);
    SAMPAN_CHECK(rank == r, ErrorCode::kInvalidArgument,
                 "{}: tensor '{}' has shape {}: rank {} but adapter_config.json says r = {}", path,
                 name, shape_str(t.shape()), rank, r);
    LoraPair& pair = a.layers[static_cast<size_t>(key->layer)][static_cast<size_t>(key->module)];
    (key->matrix == 'A' ? pair.a : pair.b) = std::move(t);
  }
  SAMPAN_CHECK(!a.layers.empty(), ErrorCode::kInvalidArgument, "{}: holds no LoRA tensors", path);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (int m = 0; m < kLoraModuleCount; ++m) {
      const LoraPair& p = a.layers[l][static_cast<size_t>(m)];
      const bool has_a = p.a.defined(), has_b = p.b.defined();
      if (has_a == has_b) continue;
      const int64_t layer = static_cast<int64_t>(l);
      fail(ErrorCode::kInvalidArgument, "{}: tensor '{}' is missing (its partner '{}' is present)",
           path, lora_tensor_name(layer, m, has_a ? 'B' : 'A'),
           lora_tensor_name(layer, m, has_a ? 'A' : 'B'));
    }
  }
  return a;
}

}  // namespace

LoraAdapter load_lora_adapter(const std::string& dir) {
  try {
    return read_adapter(dir);
  } catch (const Error& e) {
    // The readers below (JSON, safetensors) word their errors as model errors; an adapter is the
    // caller's input. The message already names the file and the key or tensor. A missing
    // directory or file stays kNotFound.
    if (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kOutOfMemory ||
        e.code() == ErrorCode::kNotFound) {
      throw;
    }
    throw Error(ErrorCode::kInvalidArgument, e.what());
  }
}

void check_lora_adapter(const LoraAdapter& adapter, const HfConfig& config) {
  const std::string who = !adapter.name.empty() ? adapter.name
                          : !adapter.dir.empty() ? adapter.dir
                                                 : std::string("(made in memory)");
  check_targets(adapter.config.targets, fmt::format("adapter '{}'", who));
  const int64_t n_layers = static_cast<int64_t>(adapter.layers.size());
  const int64_t r = adapter.config.rank;
  // Layer by layer in module order, so the first mismatch named is the one peft would meet first.
  for (int64_t l = 0; l < config.n_layer; ++l) {
    for (int m = 0; m < kLoraModuleCount; ++m) {
      const char* t = kLoraModules[static_cast<size_t>(m)];
      if (std::find(adapter.config.targets.begin(), adapter.config.targets.end(), t) ==
          adapter.config.targets.end()) {
        continue;
      }
      const auto [in, out] = lora_module_shape(config, m);
      const std::string a_name = lora_tensor_name(l, m, 'A');
      const bool present =
          l < n_layers && adapter.layers[static_cast<size_t>(l)][static_cast<size_t>(m)].defined();
      SAMPAN_CHECK(present, ErrorCode::kInvalidArgument,
                   "adapter '{}': {} is missing (target_modules lists {} and the base model has {} "
                   "layers)",
                   who, a_name, t, config.n_layer);
      const LoraPair& p = adapter.layers[static_cast<size_t>(l)][static_cast<size_t>(m)];
      const Shape want_a = {r, in}, want_b = {out, r};
      SAMPAN_CHECK(p.a.shape() == want_a, ErrorCode::kInvalidArgument,
                   "adapter '{}': {} is {} but the base model needs {}", who, a_name,
                   shape_str(p.a.shape()), shape_str(want_a));
      SAMPAN_CHECK(p.b.shape() == want_b, ErrorCode::kInvalidArgument,
                   "adapter '{}': {} is {} but the base model needs {}", who,
                   lora_tensor_name(l, m, 'B'), shape_str(p.b.shape()), shape_str(want_b));
      SAMPAN_CHECK(p.a.dtype() == DType::kF32 && p.b.dtype() == DType::kF32 &&
                       p.a.is_contiguous() && p.b.is_contiguous(),
                   ErrorCode::kInvalidArgument, "adapter '{}': {} is not contiguous f32", who,
                   a_name);
    }
  }
  // Checked after the shapes: an adapter for another model is best told by a shape.
  if (n_layers > config.n_layer) {
    // Name the first tensor of a layer the base does not have.
    for (int m = 0; m < kLoraModuleCount; ++m) {
      const auto& extra = adapter.layers[static_cast<size_t>(config.n_layer)];
      if (!extra[static_cast<size_t>(m)].defined()) continue;
      fail(ErrorCode::kInvalidArgument,
           "adapter '{}': {} is for layer {} but the base model has {} layers", who,
           lora_tensor_name(config.n_layer, m, 'A'), config.n_layer, config.n_layer);
    }
    fail(ErrorCode::kInvalidArgument, "adapter '{}': has {} layers but the base model has {}", who,
         n_layers, config.n_layer);
  }
}

LoraAdapter make_lora_adapter(const LoraConfig& lora, const HfConfig& config, uint64_t seed) {
  SAMPAN_CHECK(lora.rank >= 1 && lora.rank <= kMaxRank, ErrorCode::kInvalidArgument,
               "LoRA rank {} outside 1..{}", lora.rank, kMaxRank);
  check_targets(lora.targets, "LoRA config");
  LoraAdapter a;
  a.config = lora;
  a.layers.resize(static_cast<size_t>(config.n_layer));
  // One generator, modules in a fixed order: the same seed gives the same adapter everywhere
  // (std's distributions are not portable across standard libraries, so the mapping is ours).
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](double bound) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    return static_cast<float>((2.0 * u - 1.0) * bound);
  };
  for (int64_t l = 0; l < config.n_layer; ++l) {
    for (int m = 0; m < kLoraModuleCount; ++m) {
      if (std::find(lora.targets.begin(), lora.targets.end(),
                    kLoraModules[static_cast<size_t>(m)]) == lora.targets.end()) {
        continue;
      }
      const auto [in, out] = lora_module_shape(config, m);
      LoraPair& p = a.layers[static_cast<size_t>(l)][static_cast<size_t>(m)];
      // kaiming_uniform_(a = sqrt(5)) on [r, in]: gain sqrt(1/3), bound gain * sqrt(3 / in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      p.a = Tensor::empty({lora.rank, in}, DType::kF32);
      float* pa = p.a.data<float>();
      for (int64_t i = 0; i < p.a.numel(); ++i) pa[i] = uniform(bound);
      p.b = Tensor::zeros({out, lora.rank}, DType::kF32);
    }
  }
  return a;
}

void save_lora_adapter(const LoraAdapter& adapter, const std::string& dir) {
  check_targets(adapter.config.targets, fmt::format("adapter '{}'", adapter.name));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SAMPAN_CHECK(!ec && std::filesystem::is_directory(dir), ErrorCode::kIo,
               "{}: cannot create the adapter directory: {}", dir, ec.message());
  std::vector<NamedTensor> tensors;
  for (size_t l = 0; l < adapter.layers.size(); ++l) {
    for (int m = 0; m < kLoraModuleCount; ++m) {
      const LoraPair& p = adapter.layers[l][static_cast<size_t>(m)];
      if (!p.defined()) continue;
      const int64_t layer = static_cast<int64_t>(l);
      tensors.push_back({lora_tensor_name(layer, m, 'A'), p.a.to_f32()});
      tensors.push_back({lora_tensor_name(layer, m, 'B'), p.b.to_f32()});
    }
  }
  // Weights first: a config without its weights is refused on load, never half-applied.
  write_safetensors(path_in(dir, kWeightsFile), tensors, {{"format", "pt"}});
  write_text_file(path_in(dir, kConfigFile), json_text(adapter));
}

}  // namespace sampan::models
