// The object behind a SampanConfig handle, shared by the predictor and engine halves of the C API.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "engine/models/model_options.h"

namespace sampan::capi {

// A snapshot of the options; predictors and engines copy one at creation.
struct ConfigData {
  std::string model_dir;    // the model: a directory or a model file (.onnx)
  std::string params_file;  // Paddle's separate params file; "" for none (the only form today)
  std::string device = "cpu";
  int32_t threads = 0;
  std::string precision = "bf16";
  // Whether sampan_config_set_precision was called: a classic model computes in bf16 only when
  // "bf16" was asked for (the default "bf16" means "LLM weights as stored", and classic models
  // default to f32).
  bool precision_set = false;
  int32_t int4_group_size = 128;
  std::string kv_cache_dtype = "f32";
  int64_t max_model_len = 0;
  int64_t kv_cache_bytes = 1LL << 30;
  int32_t max_batch_size = 64;
  // LoRA adapters an engine serves besides the base: (name, PEFT directory) in the order added.
  // A deque so that the strings a getter returned stay put while more are added.
  struct Lora {
    std::string name;
    std::string dir;
  };
  std::deque<Lora> lora;

  // Weight format, group size and KV format as the model builders take them. The strings were
  // validated by the setters, so this cannot fail.
  models::ModelBuildOptions build_options() const;
  // ApiError(INVALID_ARGUMENT) when no model dir was set.
  void require_model_dir() const;
};

struct Config {
  mutable std::mutex mu;
  ConfigData data;
};

// The config's data, copied under its lock (ApiError INVALID_HANDLE for a bad handle).
ConfigData snapshot_config(const void* handle);

}  // namespace sampan::capi
