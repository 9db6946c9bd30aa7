// Placeholder until the command lands: registers the subcommand so main.cc links.
#include "engine/core/error.h"
#include "server/commands.h"

namespace sampan::cli {

Runner add_quantize(CLI::App& app) {
  app.add_subcommand("quantize", "Quantize (and optionally rotate) a model directory into a new one");
  return [] () -> int {
    fail(ErrorCode::kUnsupported, "sampan quantize: not implemented yet");
  };
}

}  // namespace sampan::cli
