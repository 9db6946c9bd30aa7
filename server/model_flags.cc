#include "server/model_flags.h"

#include <memory>
#include <string>

#include "engine/core/error.h"
#include "engine/models/lora_adapter.h"
#include "engine/runtime/device_select.h"

namespace sampan::cli {

CLI::Validator int4_group_size_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t g = 0;
        if (!CLI::detail::lexical_cast(text, g) || !int4_group_size_ok(g)) {
          return fmt::format("{} is not one of {}", text, kInt4GroupSizesText);
        }
        return {};
      },
      "32|64|128");
}

void add_model_build_flags(CLI::App& cmd, models::ModelBuildOptions* out) {
  cmd.add_option_function<std::string>(
         "--quantization",
         [out](const std::string& v) {
           models::parse_weight_format(v.c_str(), &out->quantization.format);
         },
         "quantize float weights on load: none|fp8|int4")
      ->check(CLI::IsMember({"none", "fp8", "int4"}));
  cmd.add_option("--group-size", out->quantization.group_size, "int4 group size: 32|64|128")
      ->check(int4_group_size_validator());
  cmd.add_flag_function(
      "--asymmetric", [out](int64_t) { out->quantization.symmetric = false; },
      "int4 with a per-group zero point");
  cmd.add_option_function<std::string>(
         "--scale-search",
         [out](const std::string& v) {
           models::parse_scale_search(v.c_str(), &out->quantization.scale_search);
         },
         "int4 scales of least squared weight error: auto (with --hadamard)|on|off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd.add_option_function<std::string>(
         "--scale-dtype",
         [out](const std::string& v) {
           out->quantization.scale_dtype = v == "bf16" ? DType::kBF16 : DType::kF16;
         },
         "int4 scale type: f16|bf16")
      ->check(CLI::IsMember({"f16", "bf16"}));
  cmd.add_flag_function(
      "--hadamard", [out](int64_t) { out->hadamard.enabled = true; },
      "rotate the weights on load (QuaRot-style Hadamard), before any quantization");
  cmd.add_option("--hadamard-seed", out->hadamard.seed, "seed of the rotation's random signs");
  cmd.add_option_function<std::string>(
         "--kv-cache-dtype",
         [out](const std::string& v) { parse_kv_dtype(v.c_str(), &out->kv_cache_dtype); },
         "KV cache format: f32|bf16|fp8|int8|int4")
      ->check(CLI::IsMember({"f32", "bf16", "fp8", "int8", "int4"}));
  cmd.add_flag_function(
      "--kv-hadamard", [out](int64_t) { out->kv_hadamard = true; },
      "Walsh-Hadamard on Q/K heads so K is cached in a rotated basis");
}

void add_lora_flag(CLI::App& cmd, std::string* dir) {
  cmd.add_option("--lora", *dir, "PEFT LoRA adapter directory applied to the model");
}

void load_lora_flag(const std::string& dir, models::ModelBuildOptions* build) {
  if (dir.empty()) return;
  build->lora.push_back(
      std::make_shared<const models::LoraAdapter>(models::load_lora_adapter(dir)));
}

void add_device_flag(CLI::App& cmd, Device* out) {
  cmd.add_option_function<std::string>(
         "--device", [out](const std::string& v) { *out = runtime::parse_device(v); },
         "where the model runs: cpu|cuda|cuda:N (default cpu)")
      ->check([](const std::string& v) -> std::string {
        try {
          runtime::parse_device(v);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      });
}

void add_cuda_graphs_flag(CLI::App& cmd, bool* on) {
  cmd.add_flag_function(
      "--no-cuda-graphs", [on](int64_t) { *on = false; },
      "on a GPU, launch decode steps node by node instead of replaying CUDA graphs");
}

}  // namespace sampan::cli
