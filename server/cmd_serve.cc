// sampan serve --model DIR [--config FILE.yaml] [flags]: the model server.
//
// Start-up order matters to orchestrators: the HTTP and gRPC listeners come up first (liveness
// answers 200 at once, readiness 503), then the model loads, then readiness turns 200. SIGTERM
// (or SIGINT) starts a graceful shutdown: readiness goes 503, the HTTP listener closes, new
// generation requests get 503 / UNAVAILABLE, in-flight requests finish within --shutdown-grace
// seconds (then they are cancelled), the servers stop and the process exits 0.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <cstdlib>

#include "engine/core/error.h"
#include "engine/core/log.h"
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
  // Fault injection for the tests (tests/e2e/test_serve_faults.py); never set in production.
  runtime::EngineOptions engine_options = cfg.engine;
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
  host.set_loaded(engine, chat);
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
