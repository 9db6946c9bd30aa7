// The `sampan serve` YAML config: the input is the file given with --config, resolved over the
// defaults as `sampan serve --model M --config FILE` does.
#include <CLI/CLI.hpp>

#include "engine/core/error.h"
#include "server/serve_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      sampan::fuzz::write_temp("serve.yaml", sampan::fuzz::as_text(data, size));
  CLI::App app("fuzz");
  sampan::server::ServeConfig flags;
  sampan::server::add_serve_flags(app, flags);
  const std::string config = "--config=" + path;
  const char* argv[] = {"sampan-serve", "--model=/nonexistent-model", config.c_str()};
  try {
    app.parse(3, argv);
    (void)sampan::server::resolve_serve_config(app, flags);
  } catch (const sampan::Error&) {
  } catch (const CLI::Error&) {
  }
  return 0;
}
