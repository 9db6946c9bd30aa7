// Placeholder until the command lands: registers the subcommand so main.cc links.
#include "engine/core/error.h"
#include "server/commands.h"

namespace sampan::cli {

Runner add_bench_serve(CLI::App& app) {
  app.add_subcommand("bench-serve", "Load-test an OpenAI-compatible HTTP or Sampan gRPC endpoint");
  return [] () -> int {
    fail(ErrorCode::kUnsupported, "sampan bench-serve: not implemented yet");
  };
}

}  // namespace sampan::cli
