// sampan serve --model DIR [--config FILE.yaml] [flags]: the model server.
//
// A language model (a Hugging Face directory) is served by runtime::Engine over every API. A
// classic model (--model FILE.onnx, or a directory holding one) is served by a
// runtime::TensorSession over KServe v2 only (HTTP /v2/models/<name>/infer and gRPC
// ModelInfer; the LLM endpoints answer 400 naming the KServe route). For a classic model the
// flags that would change what the model computes (--quantization, --hadamard, --kv-cache-dtype,
// --kv-hadamard, a --device other than cpu) are refused with one line; the LLM engine's
// scheduling and cache flags (--max-model-len, --block-size, --num-kv-blocks, --kv-cache-bytes,
// --max-running, --max-batched-tokens, --no-prefix-cache, --default-max-tokens,
// --request-timeout, ...) are ignored with one warning naming them. --threads (kernel threads)
// and --max-waiting (queued requests) apply to both.
//
// Start-up order matters to orchestrators: the HTTP and gRPC listeners come up first (liveness
// answers 200 at once, readiness 503), then the model loads, then readiness turns 200. SIGTERM
// (or SIGINT) starts a graceful shutdown: readiness goes 503, the HTTP listener closes, new
// generation requests get 503 / UNAVAILABLE, in-flight requests finish within --shutdown-grace
// seconds (then they are cancelled), the servers stop and the process exits 0.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <thread>

#include <cstdlib>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/models/lora_adapter.h"
#include "engine/models/model.h"
#include "engine/runtime/tensor_session.h"
#include "server/api_routes.h"
#include "server/commands.h"
#include "server/grpc_server.h"
#include "server/http_server.h"
#include "server/model_host.h"
#include "server/serve_config.h"
#include "server/serve_metrics.h"

namespace sampan::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Blocks SIGTERM/SIGINT in this thread (and every thread created after it, which inherit the
// mask), so that they are only ever received by sigwait() in the main thread: no async-signal
// handler runs in the middle of the engine or gRPC.
sigset_t block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Writes to a peer that has gone must fail with EPIPE, not kill the server.
  signal(SIGPIPE, SIG_IGN);
  return set;
}

// Requests run by a classic model's session at the same time; later ones queue.
constexpr int kTensorExecutors = 2;

// For a classic model: refuses the flags that would change what it computes, warns once about
// the LLM engine's flags that do not apply (values other than their defaults).
void check_classic_flags(const server::ServeConfig& cfg) {
  const server::ServeConfig def;
  std::vector<std::string> refused, ignored;
  if (cfg.quantization != def.quantization) refused.push_back("--quantization");
  if (cfg.asymmetric != def.asymmetric) refused.push_back("--asymmetric");
  if (cfg.engine.build.hadamard.enabled != def.engine.build.hadamard.enabled)
    refused.push_back("--hadamard");
  if (cfg.kv_cache_dtype != def.kv_cache_dtype) refused.push_back("--kv-cache-dtype");
  if (cfg.engine.build.kv_hadamard != def.engine.build.kv_hadamard) refused.push_back("--kv-hadamard");
  if (cfg.device != def.device) refused.push_back("--device " + cfg.device);
  if (!cfg.lora_adapters.empty()) refused.push_back("--lora");
  SAMPAN_CHECK(refused.empty(), ErrorCode::kInvalidArgument,
               "{}: a classic model (ONNX) is served as it is, on the CPU; {} appl{} to language "
               "models only", cfg.model, fmt::join(refused, ", "), refused.size() == 1 ? "ies" : "y");
  const runtime::EngineOptions& e = cfg.engine;
  const runtime::EngineOptions& d = def.engine;
  if (e.max_model_len != d.max_model_len) ignored.push_back("--max-model-len");
  if (e.block_size != d.block_size) ignored.push_back("--block-size");
  if (e.num_kv_blocks != d.num_kv_blocks) ignored.push_back("--num-kv-blocks");
  if (e.kv_cache_bytes != d.kv_cache_bytes) ignored.push_back("--kv-cache-bytes");
  if (e.max_running != d.max_running) ignored.push_back("--max-running");
  if (e.max_batched_tokens != d.max_batched_tokens) ignored.push_back("--max-batched-tokens");
  if (e.prefix_cache != d.prefix_cache) ignored.push_back("--no-prefix-cache");
  if (e.request_timeout_s != d.request_timeout_s) ignored.push_back("--request-timeout");
  if (e.cuda_graphs != d.cuda_graphs) ignored.push_back("--no-cuda-graphs");
  if (e.device_sampling != d.device_sampling) ignored.push_back("--no-device-sampling");
  if (cfg.default_max_tokens != def.default_max_tokens) ignored.push_back("--default-max-tokens");
  if (!ignored.empty()) {
    log::warn("{} appl{} to language models only; ignored for the classic model {}",
              fmt::join(ignored, ", "), ignored.size() == 1 ? "ies" : "y", cfg.model);
  }
}

// The classic model's part of run_serve: load, serve until SIGTERM/SIGINT, drain.
int serve_classic(const server::ServeConfig& cfg, const std::string& name, server::ModelHost& host,
                  server::ServeMetrics& metrics, server::HttpServer& http,
                  server::GrpcServer* grpc, const sigset_t& signals, Clock::time_point t0) {
  check_classic_flags(cfg);
  models::LoadOptions load;
  SAMPAN_CHECK(models::parse_precision(cfg.precision, &load.precision), ErrorCode::kInvalidArgument,
               "--precision {}: expected f32 or bf16", cfg.precision);
  std::shared_ptr<const models::Model> model = models::load_model(cfg.model, load);
  runtime::TensorSessionOptions so;
  so.threads = cfg.engine.threads;
  so.executors = kTensorExecutors;
  so.max_waiting = cfg.engine.max_waiting;
  so.max_batch = cfg.max_batch_size;
  so.batch_delay = std::chrono::microseconds(static_cast<int64_t>(cfg.batch_delay_ms * 1000));
  auto session = std::make_shared<runtime::TensorSession>(model, so);
  if (so.max_batch > 1 && !session->batchable()) {
    log::warn("--max-batch-size {}: requests run one by one: {}", so.max_batch,
              session->not_batchable_reason());
  }
  host.set_tensor_session(session);
  metrics.set_tensor_stats_source([s = session.get()] {
    return server::ServeMetrics::TensorStats{s->batch_stats(), s->running(), s->waiting()};
  });
  metrics.set_ready(true);
  log::info("ready in {:.2f} s: classic model '{}' ({}, {}), {} inputs, {} outputs, {} concurrent "
            "runs, max waiting {}, dynamic batching {}; served over KServe v2 (HTTP "
            "/v2/models/{}/infer, gRPC ModelInfer)",
            std::chrono::duration<double>(Clock::now() - t0).count(), name, model->format,
            model->architecture, model->signature.inputs.size(), model->signature.outputs.size(),
            so.executors, so.max_waiting,
            so.max_batch > 1 && session->batchable()
                ? fmt::format("up to {} rows, {} ms", so.max_batch, cfg.batch_delay_ms)
                : std::string("off"),
            name);

  int sig = 0;
  sigwait(&signals, &sig);
  log::info("received {}: draining (grace {:.1f} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            cfg.shutdown_grace_s);
  const auto t_stop = Clock::now();
  host.set_draining();
  metrics.set_ready(false);
  http.stop_accepting();
  session->shutdown();
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(cfg.shutdown_grace_s * 1000));
  if (!session->wait_idle(grace)) {
    // Runs cannot be cancelled half-way; the answers reach the servers, which must still exist.
    log::warn("grace period over with {} running and {} waiting requests; waiting for them",
              session->running(), session->waiting());
    session->wait_idle(std::chrono::seconds(60));
  }
  const auto flush_deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < flush_deadline && http.open_connections() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (grpc) grpc->shutdown(1.0);
  http.stop();
  log::info("stopped after {:.2f} s", std::chrono::duration<double>(Clock::now() - t_stop).count());
  return 0;
}

int run_serve(const server::ServeConfig& cfg) {
  const sigset_t signals = block_shutdown_signals();
  if (cfg.log_format == "json") log::set_json(true);

  server::ServeMetrics metrics;
  std::string name = cfg.served_model_name;
  if (name.empty()) {
    name = std::filesystem::path(cfg.model).lexically_normal().filename().string();
    if (name.empty() || name == ".") {
      name = std::filesystem::absolute(cfg.model).lexically_normal().parent_path().filename();
    }
  }
  server::ModelHost host(name, cfg.default_max_tokens);
  std::vector<std::string> adapter_names;
  for (const auto& [adapter, dir] : cfg.lora_adapters) {
    SAMPAN_CHECK(adapter != name, ErrorCode::kInvalidArgument,
                 "--lora {}={}: the adapter's name is the base model's served name", adapter, dir);
    adapter_names.push_back(adapter);
  }
  host.set_adapters(adapter_names);
  metrics.set_lora_names(adapter_names);

  server::HttpServerOptions hopt;
  hopt.host = cfg.host;
  hopt.port = cfg.http_port;
  hopt.threads = cfg.http_threads;
  hopt.max_body_bytes = cfg.max_body_bytes;
  hopt.max_connections = cfg.max_connections;
  hopt.idle_timeout_s = cfg.idle_timeout_s;
  hopt.tls_cert = cfg.tls_cert;
  hopt.tls_key = cfg.tls_key;
  hopt.api_keys = cfg.api_keys;
  server::HttpServer http(hopt, server::make_api_router(host, metrics), &metrics);
  const int http_port = http.start();
  log::info("HTTP{} listening on {}:{}", cfg.tls_cert.empty() ? "" : "S", cfg.host, http_port);

  std::unique_ptr<server::GrpcServer> grpc;
  if (cfg.grpc_port >= 0) {
    server::GrpcServerOptions gopt;
    gopt.host = cfg.host;
    gopt.port = cfg.grpc_port;
    gopt.tls_cert = cfg.tls_cert;
    gopt.tls_key = cfg.tls_key;
    gopt.api_keys = cfg.api_keys;
    gopt.max_message_bytes = cfg.max_body_bytes;
    grpc = std::make_unique<server::GrpcServer>(gopt, host, metrics);
    const int grpc_port = grpc->start();
    log::info("gRPC{} listening on {}:{}", cfg.tls_cert.empty() ? "" : " (TLS)", cfg.host,
              grpc_port);
  }

  const auto t0 = Clock::now();
  log::info("loading model '{}' from {}", name, cfg.model);
  if (!models::is_decoder_format(models::model_format_of(cfg.model))) {
    return serve_classic(cfg, name, host, metrics, http, grpc.get(), signals, t0);
  }
  if (cfg.max_batch_size != server::ServeConfig{}.max_batch_size ||
      cfg.batch_delay_ms != server::ServeConfig{}.batch_delay_ms) {
    log::warn("--max-batch-size / --batch-delay-ms apply to classic models; a language model "
              "batches continuously (--max-running, --max-batched-tokens)");
  }
  if (cfg.precision != server::ServeConfig{}.precision) {
    log::warn("--precision applies to classic models; a language model's precision is that of "
              "its weights (--quantization) and SAMPAN_GEMM_PRECISION");
  }
  // Fault injection for the tests (tests/e2e/test_serve_faults.py); never set in production.
  runtime::EngineOptions engine_options = cfg.engine;
  // The adapters are read here, not by the config reader: a bad adapter is one line naming its
  // file, and requests pick them by name (ModelHost::lora_index).
  for (const auto& [adapter, dir] : cfg.lora_adapters) {
    auto lora = std::make_shared<models::LoraAdapter>(models::load_lora_adapter(dir));
    lora->name = adapter;
    engine_options.build.lora.push_back(std::move(lora));
  }
  if (const char* f = std::getenv("SAMPAN_TEST_FAULT_EVERY_N_STEPS"); f && *f) {
    engine_options.test_fault_every_n_steps = std::strtoll(f, nullptr, 10);
    log::warn("SAMPAN_TEST_FAULT_EVERY_N_STEPS={}: every {}th forward fails on purpose", f,
              engine_options.test_fault_every_n_steps);
  }
  std::shared_ptr<runtime::Engine> engine = runtime::Engine::load(cfg.model, engine_options);
  engine->set_step_observer([&metrics](const runtime::StepStats& s) { metrics.step(s); });
  metrics.set_engine_stats_source([e = engine.get()] { return e->stats(); });
  std::shared_ptr<const ChatPrompt> chat;
  try {
    chat = std::make_shared<const ChatPrompt>(engine->tokenizer(), cfg.model);
  } catch (const Error& e) {
    log::warn("chat completions disabled: {}", e.what());
  }
  server::ToolCallFormat tool_calls = server::ToolCallFormat::kNone;
  if (cfg.tool_call_parser == "auto") {
    if (chat) tool_calls = server::detect_tool_call_format(engine->tokenizer().chat_template());
  } else {
    tool_calls = *server::tool_call_format_from_name(cfg.tool_call_parser);
  }
  if (chat) log::info("tool calls in chat replies: {}", server::tool_call_format_name(tool_calls));
  host.set_loaded(engine, chat, tool_calls);
  metrics.set_ready(true);
  const runtime::EngineStats st = engine->stats();
  log::info("ready in {:.2f} s: model '{}', context {} tokens, KV cache {} blocks of {} tokens "
            "({:.1f} MiB, {} bytes per token), max running {}, max batched tokens {}, max waiting {}",
            std::chrono::duration<double>(Clock::now() - t0).count(), name,
            engine->max_model_len(), st.kv_blocks_total, engine->options().block_size,
            static_cast<double>(st.kv_cache_bytes) / (1 << 20), st.kv_bytes_per_token,
            engine->options().max_running, engine->options().max_batched_tokens,
            engine->options().max_waiting);

  int sig = 0;
  sigwait(&signals, &sig);
  log::info("received {}: draining (grace {:.1f} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            cfg.shutdown_grace_s);
  const auto t_stop = Clock::now();
  host.set_draining();
  metrics.set_ready(false);
  http.stop_accepting();
  engine->begin_shutdown();
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(cfg.shutdown_grace_s * 1000));
  if (!engine->wait_idle(grace)) {
    log::warn("grace period over with {} running and {} waiting requests: cancelling them",
              engine->stats().running, engine->stats().waiting);
    engine->cancel_all();
    engine->wait_idle(std::chrono::seconds(5));
  }
  // The final events are posted to the connections; give them a moment to reach the sockets
  // (bounded: idle keep-alive connections never close by themselves).
  const auto flush_deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < flush_deadline && http.open_connections() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (grpc) grpc->shutdown(1.0);
  http.stop();
  log::info("stopped after {:.2f} s", std::chrono::duration<double>(Clock::now() - t_stop).count());
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto flags = std::make_shared<server::ServeConfig>();
  auto* cmd = app.add_subcommand(
      "serve", "Serve a model over HTTP (OpenAI-compatible, KServe v2 REST) and gRPC");
  server::add_serve_flags(*cmd, *flags);
  return [flags, cmd] { return run_serve(server::resolve_serve_config(*cmd, *flags)); };
}

}  // namespace sampan::cli
