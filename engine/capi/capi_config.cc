// SampanConfig: options for predictors and engines, set and read through functions so the
// struct behind the handle may grow without breaking the ABI.
#include "engine/capi/capi_config.h"

#include "engine/capi/capi_internal.h"
#include "engine/core/error.h"
#include "engine/runtime/device_select.h"
#include "engine/models/model_options.h"

namespace sampan::capi {

models::ModelBuildOptions ConfigData::build_options() const {
  models::ModelBuildOptions o;
  models::parse_weight_format(precision.c_str(), &o.quantization.format);
  o.quantization.group_size = int4_group_size;
  parse_kv_dtype(kv_cache_dtype.c_str(), &o.kv_cache_dtype);
  return o;
}

void ConfigData::require_model_dir() const {
  if (model_dir.empty()) {
    api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
             "the config has no model (call sampan_config_set_model_dir or "
             "sampan_config_set_model)");
  }
}

ConfigData snapshot_config(const void* handle) {
  auto c = lookup<Config>(handle, Kind::kConfig, "config");
  std::lock_guard<std::mutex> lock(c->mu);
  return c->data;
}

namespace {

// Runs `set` on the config's data under its lock.
template <typename F>
SampanStatus set_field(SampanConfig* config, F&& set) {
  return guarded([&] {
    auto c = lookup<Config>(config, Kind::kConfig, "config");
    std::lock_guard<std::mutex> lock(c->mu);
    set(c->data);
  });
}

template <typename T, typename F>
SampanStatus get_field(const SampanConfig* config, T* out, F&& get) {
  return guarded([&] {
    auto c = lookup<Config>(config, Kind::kConfig, "config");
    require_arg(out, "out");
    std::lock_guard<std::mutex> lock(c->mu);
    *out = get(c->data);
  });
}

const char* checked_text(const char* text, const char* what) {
  require_arg(text, what);
  return text;
}

}  // namespace
}  // namespace sampan::capi

using namespace sampan;
using namespace sampan::capi;

extern "C" {

SAMPAN_API SampanStatus sampan_config_create(SampanConfig** out) {
  return guarded([&] {
    require_arg(out, "out");
    *out = as_handle<SampanConfig>(register_handle(Kind::kConfig, std::make_shared<Config>()));
  });
}

SAMPAN_API SampanStatus sampan_config_destroy(SampanConfig* config) {
  return guarded([&] {
    if (config != nullptr) take<Config>(config, Kind::kConfig, "config");
  });
}

SAMPAN_API SampanStatus sampan_config_set_model_dir(SampanConfig* config, const char* dir) {
  return set_field(config, [&](ConfigData& d) {
    const std::string value = checked_text(dir, "dir");
    if (value.empty()) api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "model dir is empty");
    d.model_dir = value;
  });
}

SAMPAN_API SampanStatus sampan_config_set_model(SampanConfig* config, const char* model,
                                                const char* params_file) {
  return set_field(config, [&](ConfigData& d) {
    const std::string value = checked_text(model, "model");
    if (value.empty()) api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "model path is empty");
    d.model_dir = value;
    d.params_file = params_file != nullptr ? params_file : "";
  });
}

SAMPAN_API SampanStatus sampan_config_set_params_file(SampanConfig* config,
                                                      const char* params_file) {
  return set_field(config, [&](ConfigData& d) {
    d.params_file = checked_text(params_file, "params_file");
  });
}

SAMPAN_API SampanStatus sampan_config_set_device(SampanConfig* config, const char* device) {
  return set_field(config, [&](ConfigData& d) {
    const std::string value = checked_text(device, "device");
    Device parsed;
    try {
      parsed = runtime::parse_device(value);
    } catch (const Error&) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "unknown device '{}' (expected 'cpu', 'cuda' or 'cuda:N')", value);
    }
    // Checked here rather than at load so the caller learns at once; a build without CUDA and
    // a machine without a visible GPU are both UNSUPPORTED (valid, but not here), each named.
    try {
      runtime::require_device(parsed);
    } catch (const Error& e) {
      api_fail(SAMPAN_ERROR_UNSUPPORTED, "device '{}': {}", value, e.what());
    }
    d.device = parsed.str();
  });
}

SAMPAN_API SampanStatus sampan_config_set_threads(SampanConfig* config, int32_t threads) {
  return set_field(config, [&](ConfigData& d) {
    if (threads < 0) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "threads must be >= 0 (0: one per core), got {}",
               threads);
    }
    d.threads = threads;
  });
}

SAMPAN_API SampanStatus sampan_config_set_precision(SampanConfig* config, const char* precision) {
  return set_field(config, [&](ConfigData& d) {
    const std::string value = checked_text(precision, "precision");
    if (value != "f32" && value != "bf16" && value != "fp8" && value != "int4") {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "unknown precision '{}' (expected f32, bf16, fp8 or int4)", value);
    }
    d.precision = value;
    d.precision_set = true;
  });
}

SAMPAN_API SampanStatus sampan_config_set_int4_group_size(SampanConfig* config, int32_t size) {
  return set_field(config, [&](ConfigData& d) {
    if (!int4_group_size_ok(size)) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "int4 group size must be 32, 64 or 128, got {}",
               size);
    }
    d.int4_group_size = size;
  });
}

SAMPAN_API SampanStatus sampan_config_set_kv_cache_dtype(SampanConfig* config, const char* dtype) {
  return set_field(config, [&](ConfigData& d) {
    const std::string value = checked_text(dtype, "dtype");
    KvDtype parsed;
    if (!parse_kv_dtype(value.c_str(), &parsed)) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "unknown KV cache dtype '{}' (expected f32, bf16, fp8, int8 or int4)", value);
    }
    d.kv_cache_dtype = kv_dtype_name(parsed);
  });
}

SAMPAN_API SampanStatus sampan_config_set_max_model_len(SampanConfig* config, int64_t tokens) {
  return set_field(config, [&](ConfigData& d) {
    if (tokens < 0) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "max_model_len must be >= 0, got {}", tokens);
    }
    d.max_model_len = tokens;
  });
}

SAMPAN_API SampanStatus sampan_config_set_kv_cache_bytes(SampanConfig* config, int64_t bytes) {
  return set_field(config, [&](ConfigData& d) {
    if (bytes <= 0) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "kv_cache_bytes must be > 0, got {}", bytes);
    }
    d.kv_cache_bytes = bytes;
  });
}

SAMPAN_API SampanStatus sampan_config_set_max_batch_size(SampanConfig* config, int32_t n) {
  return set_field(config, [&](ConfigData& d) {
    if (n < 1) api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "max_batch_size must be >= 1, got {}", n);
    d.max_batch_size = n;
  });
}

SAMPAN_API SampanStatus sampan_config_get_model_dir(const SampanConfig* config, const char** out) {
  return get_field(config, out, [](const ConfigData& d) { return d.model_dir.c_str(); });
}
SAMPAN_API SampanStatus sampan_config_get_params_file(const SampanConfig* config,
                                                      const char** out) {
  return get_field(config, out, [](const ConfigData& d) { return d.params_file.c_str(); });
}
SAMPAN_API SampanStatus sampan_config_get_device(const SampanConfig* config, const char** out) {
  return get_field(config, out, [](const ConfigData& d) { return d.device.c_str(); });
}
SAMPAN_API SampanStatus sampan_config_get_threads(const SampanConfig* config, int32_t* out) {
  return get_field(config, out, [](const ConfigData& d) { return d.threads; });
}
SAMPAN_API SampanStatus sampan_config_get_precision(const SampanConfig* config, const char** out) {
  return get_field(config, out, [](const ConfigData& d) { return d.precision.c_str(); });
}
SAMPAN_API SampanStatus sampan_config_get_int4_group_size(const SampanConfig* config,
                                                          int32_t* out) {
  return get_field(config, out, [](const ConfigData& d) { return d.int4_group_size; });
}
SAMPAN_API SampanStatus sampan_config_get_kv_cache_dtype(const SampanConfig* config,
                                                         const char** out) {
  return get_field(config, out, [](const ConfigData& d) { return d.kv_cache_dtype.c_str(); });
}
SAMPAN_API SampanStatus sampan_config_get_max_model_len(const SampanConfig* config, int64_t* out) {
  return get_field(config, out, [](const ConfigData& d) { return d.max_model_len; });
}
SAMPAN_API SampanStatus sampan_config_get_kv_cache_bytes(const SampanConfig* config,
                                                         int64_t* out) {
  return get_field(config, out, [](const ConfigData& d) { return d.kv_cache_bytes; });
}
SAMPAN_API SampanStatus sampan_config_get_max_batch_size(const SampanConfig* config,
                                                         int32_t* out) {
  return get_field(config, out, [](const ConfigData& d) { return d.max_batch_size; });
}

SAMPAN_API SampanStatus sampan_config_add_lora(SampanConfig* config, const char* name,
                                               const char* dir) {
  return set_field(config, [&](ConfigData& d) {
    const std::string n = checked_text(name, "name");
    const std::string path = checked_text(dir, "dir");
    if (n.empty()) api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "LoRA adapter name is empty");
    if (path.empty()) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "LoRA adapter '{}': the directory is empty", n);
    }
    for (const ConfigData::Lora& l : d.lora) {
      if (l.name == n) {
        api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "LoRA adapter '{}' was already added ({})", n,
                 l.dir);
      }
    }
    d.lora.push_back({n, path});
  });
}

SAMPAN_API SampanStatus sampan_config_clear_loras(SampanConfig* config) {
  return set_field(config, [](ConfigData& d) { d.lora.clear(); });
}

SAMPAN_API SampanStatus sampan_config_get_lora_count(const SampanConfig* config, int32_t* out) {
  return get_field(config, out,
                   [](const ConfigData& d) { return static_cast<int32_t>(d.lora.size()); });
}

SAMPAN_API SampanStatus sampan_config_get_lora(const SampanConfig* config, int32_t index,
                                               const char** name, const char** dir) {
  return guarded([&] {
    auto c = lookup<Config>(config, Kind::kConfig, "config");
    require_arg(name, "name");
    require_arg(dir, "dir");
    std::lock_guard<std::mutex> lock(c->mu);
    const auto n = static_cast<int32_t>(c->data.lora.size());
    if (index < 0 || index >= n) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "LoRA index {} is out of range (the config has {})",
               index, n);
    }
    *name = c->data.lora[static_cast<size_t>(index)].name.c_str();
    *dir = c->data.lora[static_cast<size_t>(index)].dir.c_str();
  });
}

}  // extern "C"
