// sampan: the command-line entry point. Every failure ends as one "error: <message>" line on
// stderr and a non-zero exit code (1 for runtime errors, 2 for usage errors), never a crash.
#include <cstdio>
#include <exception>
#include <map>

#include "clients/bench_serve/bench_serve_cli.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "server/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Sampan: an inference engine and model server"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  std::map<CLI::App*, sampan::cli::Runner> runners;
  auto add = [&](sampan::cli::Runner (*fn)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    sampan::cli::Runner r = fn(app);
    runners[app.get_subcommands({})[before]] = std::move(r);
  };
  add(sampan::cli::add_info);
  add(sampan::cli::add_logits);
  add(sampan::cli::add_bench);
  add(sampan::cli::add_tokenize);
  add(sampan::cli::add_render_chat);
  add(sampan::cli::add_run);
  add(sampan::cli::add_chat);
  add(sampan::cli::add_serve);
  add(sampan::cli::add_quantize);
  add(sampan::cli::add_eval);
  add(sampan::cli::add_infer);
  add(sampan::cli::add_finetune);
  add(sampan::cli::add_merge_lora);
  add(sampan::cli::add_bench_serve);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    if (!log_level.empty()) {
      sampan::log::Level l;
      SAMPAN_CHECK(sampan::log::parse_level(log_level, &l), sampan::ErrorCode::kInvalidArgument,
                   "--log-level: unknown level '{}'", log_level);
      sampan::log::set_level(l);
    }
    for (CLI::App* sub : app.get_subcommands()) return runners.at(sub)();
  } catch (const sampan::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
