// Command-line flags that change how a model is built (models/model_options.h), shared by every
// subcommand that loads a model: --quantization none|fp8|int4, --group-size 32|64|128,
// --asymmetric, --scale-dtype f16|bf16, --hadamard, --hadamard-seed N,
// --kv-cache-dtype f32|bf16|fp8|int8|int4, --kv-hadamard; and --device cpu|cuda[:N], where the
// model runs, with --no-cuda-graphs; and --lora DIR, a PEFT LoRA adapter applied to the model
// (run, chat, logits, eval).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/core/device.h"
#include "engine/models/model_options.h"

namespace sampan::cli {

// Adds the flags to `cmd`; they write into *out as CLI11 parses (values are checked by CLI11,
// so a bad value is a usage error naming the flag).
void add_model_build_flags(CLI::App& cmd, models::ModelBuildOptions* out);

// Adds --lora DIR (a PEFT LoRA adapter directory, models/lora_adapter.h) writing the path into
// *dir. The adapter is read by load_lora_flag when the command runs, so a bad adapter is one
// "error: ..." line naming its file like any other load error.
void add_lora_flag(CLI::App& cmd, std::string* dir);
// With `dir` non-empty: loads the adapter and appends it to build->lora (every token of a
// CausalLm then runs through it). Throws Error(kInvalidArgument) naming the file and key/tensor.
void load_lora_flag(const std::string& dir, models::ModelBuildOptions* build);

// Accepts the int4 group sizes the kernels implement (int4_group_size_ok).
CLI::Validator int4_group_size_validator();

// Adds --device cpu|cuda|cuda:N (default cpu) writing into *out. A malformed value is a usage
// error naming the flag; whether the device exists is checked when the model loads, so the
// message is the same for every command ("cuda:0 requested but no CUDA device is visible").
void add_device_flag(CLI::App& cmd, Device* out);

// Adds --no-cuda-graphs, which clears *on: decode steps on a GPU launch node by node instead of
// replaying a recorded CUDA graph (for comparison and debugging; no effect on the CPU).
void add_cuda_graphs_flag(CLI::App& cmd, bool* on);

}  // namespace sampan::cli
