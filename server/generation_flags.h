// Command-line flags shared by `sampan run` and `sampan chat`: model loading, sampling and
// stopping, and the streaming printer both use.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/models/model_options.h"
#include "engine/runtime/generate.h"

namespace sampan::cli {

struct GenerationFlags {
  std::string model;
  int threads = 0;
  int64_t max_context = 4096;
  runtime::SamplingParams sampling;
  uint64_t seed = 0;
  bool has_seed = false;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_ids;
  std::vector<std::string> logit_bias;  // --logit-bias ID=BIAS, each checked when parsed
  bool ignore_eos = false;
  bool json_object = false;  // --json
  std::string json_schema;   // --json-schema: inline JSON or a file
  bool stats = false;
  models::ModelBuildOptions build;  // --quantization, --kv-cache-dtype, ... (model_flags.h)

  void add_to(CLI::App& cmd);
  runtime::GenerationRequest request(std::vector<int32_t> prompt) const;
};

// Prints generated text to stdout as it arrives (flushed per token) and, with --logprobs, each
// token's log-probability and alternatives to stderr.
void print_event(const runtime::GenerationEvent& ev, const tok::Tokenizer& tokenizer,
                 int top_logprobs);
// One line of figures on stderr: tokens, finish reason, speeds.
void print_stats(const runtime::GenerationResult& r);

}  // namespace sampan::cli
