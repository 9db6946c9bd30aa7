// Command-line flags that change how a model is built (models/model_options.h), shared by every
// subcommand that loads a model: --quantization none|fp8|int4, --group-size 32|64|128,
// --asymmetric, --scale-dtype f16|bf16, --hadamard, --hadamard-seed N,
// --kv-cache-dtype f32|bf16|fp8|int8|int4, --kv-hadamard.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/models/model_options.h"

namespace sampan::cli {

// Adds the flags to `cmd`; they write into *out as CLI11 parses (values are checked by CLI11,
// so a bad value is a usage error naming the flag).
void add_model_build_flags(CLI::App& cmd, models::ModelBuildOptions* out);

}  // namespace sampan::cli
