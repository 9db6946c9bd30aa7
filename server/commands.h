// The `sampan` subcommands. Each adds itself to the CLI11 app and returns a runner; runners
// return the process exit code and let sampan::Error propagate to main, which prints it as one
// "error: ..." line.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace sampan::cli {

using Runner = std::function<int()>;

Runner add_info(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_render_chat(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_quantize(CLI::App& app);  // cmd_quantize.cc
Runner add_eval(CLI::App& app);      // cmd_eval.cc
Runner add_infer(CLI::App& app);     // cmd_infer.cc
Runner add_finetune(CLI::App& app);  // cmd_finetune.cc
Runner add_merge_lora(CLI::App& app);  // cmd_merge_lora.cc

// Parses "1,2,3" into ids; throws Error(kInvalidArgument) naming the bad element.
std::vector<int32_t> parse_ids(const std::string& text);

}  // namespace sampan::cli
