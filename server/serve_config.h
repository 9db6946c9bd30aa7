// `sampan serve` settings: defaults, then the YAML config file (--config), then command-line
// flags, each later source overriding the earlier. Every limit is configurable both ways; the
// YAML keys are the flag names without the leading dashes, '-' and '_' both accepted, grouped
// or flat (see configs/serve.yaml). Unknown keys and values of the wrong type are errors naming
// the file, the key and the line.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"

namespace sampan::server {

struct ServeConfig {
  std::string model;                  // --model DIR (required, flag or config)
  std::string served_model_name;      // --served-model-name; default: the model dir's basename
  std::string host = "0.0.0.0";       // --host
  int http_port = 8000;               // --http-port; 0: pick a free port (logged)
  int grpc_port = 8001;               // --grpc-port; 0: pick a free port; -1: no gRPC
  int http_threads = 1;               // --http-threads: I/O threads of the HTTP server
  std::vector<std::string> api_keys;  // --api-key (repeatable), or env SAMPAN_API_KEY
  int64_t max_body_bytes = 4 << 20;   // --max-body-bytes: larger requests get 413
  int64_t max_connections = 4096;     // --max-connections: beyond, new connections are closed
  double idle_timeout_s = 60;         // --idle-timeout: keep-alive connections without a request
  std::string tls_cert;               // --tls-cert PEM (with --tls-key: HTTPS and gRPC TLS)
  std::string tls_key;                // --tls-key PEM
  double shutdown_grace_s = 30;       // --shutdown-grace: SIGTERM waits this long for in-flight
  std::string log_format = "text";    // --log-format text|json
  int64_t default_max_tokens = 256;   // --default-max-tokens when a request omits max_tokens
  // --tool-call-parser auto|none|hermes|llama3_json|mistral: how tool calls are read out of
  // chat replies with tools and tool_choice "auto" (server/tool_parser.h); auto: the format
  // the chat template teaches.
  std::string tool_call_parser = "auto";
  runtime::EngineOptions engine;      // --threads --max-model-len --block-size --num-kv-blocks
                                      // --kv-cache-bytes (accepts 512M / 2G) --max-running
                                      // --max-batched-tokens --max-waiting --no-prefix-cache
                                      // --request-timeout
  // Model build settings (into engine.build once validated): --quantization none|fp8|int4,
  // --group-size, --asymmetric, --scale-dtype f16|bf16, --hadamard, --hadamard-seed,
  // --kv-cache-dtype f32|bf16|fp8|int8|int4, --kv-hadamard.
  std::string quantization = "none";
  bool asymmetric = false;
  std::string scale_dtype = "f16";
  int64_t hadamard_seed = 0;
  std::string kv_cache_dtype = "f32";
  std::string device = "cpu";         // --device cpu|cuda|cuda:N (into engine.device)
  // --lora NAME=DIR or --lora DIR (named after the directory), repeatable; YAML: a list of such
  // strings. PEFT LoRA adapters served under their own model names next to the base (loaded by
  // `serve`, not by the config reader).
  std::vector<std::string> lora;
  // `lora` split and checked: names unique, [A-Za-z0-9._:/-]+, directories given.
  std::vector<std::pair<std::string, std::string>> lora_adapters;
  // Classic models: --precision f32|bf16 (models::LoadOptions::precision, as `infer --precision`).
  std::string precision = "f32";
  // Classic models: dynamic batching (runtime::TensorSessionOptions::max_batch / batch_delay).
  int max_batch_size = 1;             // --max-batch-size: rows merged from concurrent requests
  double batch_delay_ms = 1.0;        // --batch-delay-ms: wait for more requests to merge
  std::string config_file;            // --config, for messages
};

// Registers every flag on `cmd`, writing into `flags` (the flags-only layer) and recording which
// were given. Call resolve_serve_config() after parsing.
void add_serve_flags(CLI::App& cmd, ServeConfig& flags);

// Defaults <- config file (if flags.config_file is set) <- flags given on the command line.
// Validates every value (ports, sizes > 0, tls cert and key both or neither, files exist, ...).
// Throws Error(kInvalidArgument) with one line naming the key (and file:line for YAML).
ServeConfig resolve_serve_config(const CLI::App& cmd, const ServeConfig& flags);

}  // namespace sampan::server
