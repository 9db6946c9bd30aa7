// Placeholder until the command lands: registers the subcommand so main.cc links.
#include "engine/core/error.h"
#include "server/commands.h"

namespace sampan::cli {

Runner add_eval(CLI::App& app) {
  app.add_subcommand("eval", "Perplexity, KL divergence and top-1 agreement of a model on a text");
  return [] () -> int {
    fail(ErrorCode::kUnsupported, "sampan eval: not implemented yet");
  };
}

}  // namespace sampan::cli
