// PEFT LoRA adapter directories (models/lora_adapter.h): the input is adapter_config.json, a
// NUL byte, then adapter_model.safetensors. A loaded adapter is also checked against a small
// base of tests/data/models/tiny_llama3's shape (the seeds are peft-made adapters for it), as
// `--lora` and `serve --lora` do.
#include <filesystem>
#include <string>

#include "engine/core/error.h"
#include "engine/loaders/hf_config.h"
#include "engine/models/lora_adapter.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

sampan::HfConfig small_base() {
  sampan::HfConfig c;
  c.source = "fuzz-base";
  c.vocab_size = 397;
  c.hidden_size = 96;
  c.intermediate_size = 172;
  c.n_layer = 3;
  c.n_head = 6;
  c.n_head_kv = 2;
  c.head_dim = 16;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [config, weights] = sampan::fuzz::split_at_nul(sampan::fuzz::as_text(data, size));
  const std::string cfg = sampan::fuzz::write_temp("adapter_config.json", config);
  sampan::fuzz::write_temp("adapter_model.safetensors", weights);
  static const sampan::HfConfig base = small_base();
  try {
    const sampan::models::LoraAdapter a =
        sampan::models::load_lora_adapter(std::filesystem::path(cfg).parent_path().string());
    sampan::models::check_lora_adapter(a, base);
  } catch (const sampan::Error&) {
  }
  return 0;
}
