// `sampan bench-serve`, the load-test client (docs/BENCH_SERVE.md). It is a client of the server,
// not part of it: it speaks only the public protocols (OpenAI HTTP, sampan.v1.Generate gRPC) and
// links no server code. The `sampan` executable (server/main.cc) registers it with the others.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace sampan::cli {

// Adds the subcommand to `app`; the runner returns the exit code (0 when at least one request
// succeeded, 1 when none did or the server is unreachable).
std::function<int()> add_bench_serve(CLI::App& app);

}  // namespace sampan::cli
