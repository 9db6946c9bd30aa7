// safetensors header + config.json: the input is a safetensors file (8-byte header length, JSON
// header, data) and, separately, a config.json text. Every tensor the header declares is read
// back through the mapping, so an offset the validation let through would show under ASan.
#include "engine/core/error.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = sampan::fuzz::as_text(data, size);
  try {
    (void)sampan::parse_hf_config(in, "fuzz/config.json");
  } catch (const sampan::Error&) {
  }
  try {
    const auto file =
        sampan::SafetensorsFile::open(sampan::fuzz::write_temp("model.safetensors", in));
    volatile uint8_t sink = 0;
    for (const std::string& name : file.names()) {
      const sampan::Tensor t = file.get(name);
      const auto* bytes = static_cast<const uint8_t*>(t.raw());
      const size_t n = static_cast<size_t>(file.info(name).nbytes());
      if (n) sink = sink ^ bytes[0] ^ bytes[n - 1];
    }
  } catch (const sampan::Error&) {
  }
  return 0;
}
