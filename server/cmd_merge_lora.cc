// sampan merge-lora --model DIR --lora DIR --out DIR
//
// Folds a PEFT LoRA adapter into its base: every targeted projection's weight becomes
// W + s·B·A (models::merge_lora_weight), rounded once to the base's own float dtype; every other
// tensor is written unchanged, config.json and the tokenizer / generation files are copied. The
// output is a plain Hugging Face model directory (sampan and transformers load it as the base
// architecture, no adapter needed). A quantized, rotated or GGUF base is refused: its weights
// are not the float matrices the adapter was trained against.
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/safetensors_writer.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/lora_adapter.h"
#include "engine/models/model.h"
#include "server/commands.h"
#include "server/model_dir_out.h"

namespace sampan::cli {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string model, lora, out;
};

void check_paths(const Args& a) {
  SAMPAN_CHECK(models::model_format_of(a.model) == "hf", ErrorCode::kInvalidArgument,
               "--model {}: merge-lora takes a safetensors model directory with float weights, "
               "not a {} file",
               a.model, models::model_format_of(a.model));
  check_output_dir(a.model, a.out);
}

// (layer, module) of a base weight name an adapter may target, e.g.
// "model.layers.3.mlp.up_proj.weight"; nullopt for every other tensor.
std::optional<std::pair<int64_t, int>> adapted_weight(const std::string& name, int64_t n_layer) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  size_t used = 0;
  int64_t layer = -1;
  try {
    layer = std::stoll(name.substr(prefix.size()), &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (layer < 0 || layer >= n_layer) return std::nullopt;
  for (int m = 0; m < models::kLoraModuleCount; ++m) {
    if (name == models::lora_base_weight_name(layer, m)) return std::make_pair(layer, m);
  }
  return std::nullopt;
}

int run(const Args& a) {
  check_paths(a);
  const HfConfig config = load_hf_config(a.model);
  SAMPAN_CHECK(!config.quant.has_value(), ErrorCode::kInvalidArgument,
               "--model {}: the model is {} (quantization_config); merge the adapter into the "
               "original float model",
               a.model, config.quant && config.quant->rotated ? "rotated" : "quantized");
  models::LoraAdapter adapter = models::load_lora_adapter(a.lora);
  models::check_lora_adapter(adapter, config);
  const double scale = adapter.config.scale();
  const WeightStore store = WeightStore::open(a.model);

  std::vector<NamedTensor> tensors;
  int merged = 0;
  for (const std::string& name : store.names()) {
    Tensor t = store.get(name);
    if (const auto key = adapted_weight(name, config.n_layer)) {
      const models::LoraPair& p =
          adapter.layers[static_cast<size_t>(key->first)][static_cast<size_t>(key->second)];
      if (p.defined()) {
        const WeightInfo info = store.info(name);
        t = models::merge_lora_weight(t, p, scale, fmt::format("{}: tensor '{}'", info.file, name));
        ++merged;
      }
    }
    tensors.push_back({name, std::move(t)});
  }
  int expected = 0;
  for (const auto& layer : adapter.layers) {
    for (const models::LoraPair& p : layer) expected += p.defined() ? 1 : 0;
  }
  SAMPAN_CHECK(merged == expected, ErrorCode::kInvalidModel,
               "--model {}: {} of the adapter's {} projections have no weight tensor to merge into",
               a.model, expected - merged, expected);

  std::error_code ec;
  fs::create_directories(a.out, ec);
  SAMPAN_CHECK(!ec, ErrorCode::kIo, "--out: cannot create {}: {}", a.out, ec.message());
  write_safetensors_dir(a.out, tensors);
  // config.json is the base's as is: same architecture, dtype and sizes.
  copy_support_files(a.model, a.out, /*skip_config=*/false);
  fmt::print("merged {} (r = {}, scale {}) into {} projections of {} -> {}\n", a.lora,
             adapter.config.rank, scale, merged, a.model, a.out);
  return 0;
}

}  // namespace

Runner add_merge_lora(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "merge-lora", "Fold a LoRA adapter into its base model and write a plain model directory");
  cmd->add_option("--model", a->model, "base model directory (safetensors, float weights)")
      ->required();
  cmd->add_option("--lora", a->lora, "PEFT LoRA adapter directory")->required();
  cmd->add_option("--out", a->out, "output model directory (new or empty)")->required();
  return [a] { return run(*a); };
}

}  // namespace sampan::cli
