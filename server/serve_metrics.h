// The server's Prometheus metrics (text exposition format 0.0.4, written in-house in
// metrics.h/.cc). All names carry the `sampan:` prefix. Every method is thread-safe and cheap
// (atomics or a short lock); handlers call them from any thread.
//
// Exposed families:
//   sampan:requests_total{api,code}                 counter  HTTP/gRPC requests by API and status
//   sampan:request_finished_total{finish_reason}    counter  generation requests by finish reason
//   sampan:prompt_tokens_total                      counter
//   sampan:generation_tokens_total                  counter
//   sampan:time_to_first_token_seconds              histogram
//   sampan:inter_token_latency_seconds              histogram
//   sampan:e2e_request_latency_seconds              histogram
//   sampan:request_queue_time_seconds               histogram
//   sampan:num_requests_running                     gauge   (from EngineStats at scrape time)
//   sampan:num_requests_waiting                     gauge
//   sampan:kv_cache_usage_ratio                     gauge   used / total KV blocks
//   sampan:kv_cache_blocks_used                     gauge
//   sampan:kv_cache_blocks_total                    gauge
//   sampan:kv_cache_bytes                           gauge   bytes of the K/V pools, all layers
//   sampan:prefix_cache_queries_total               counter (tokens looked up)
//   sampan:prefix_cache_hits_total                  counter (tokens found)
//   sampan:num_preemptions_total                    counter
//   sampan:cuda_graph_replays_total                 counter steps replayed as a CUDA graph
//   sampan:batch_size                               histogram sequences per engine step
//   sampan:batch_tokens                             histogram tokens per engine step
//   sampan:server_ready                             gauge 1 when the model is loaded
//   sampan:lora_requests_total{adapter}             counter generation requests per LoRA adapter
//   sampan:tensor_runs_total                        counter classic-model executor runs (a merged
//                                                           batch counts once)
//   sampan:tensor_requests_total                    counter classic-model requests those runs answered
//   sampan:tensor_rows_total                        counter first-dimension rows of those runs
// (For a classic model, num_requests_running / _waiting come from its tensor session.)
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/tensor_session.h"

namespace sampan::server {

// Per generation request: when its last token came (engine thread only). See observe_token.
struct TokenClock {
  std::optional<std::chrono::steady_clock::time_point> last_token;
};

class ServeMetrics {
 public:
  ServeMetrics();
  ~ServeMetrics();

  // api: "openai", "kserve_rest", "grpc", "other"; code: HTTP status or gRPC status number.
  void request_done(const std::string& api, int code);
  // Where every front end times its tokens: called with each engine event of a request, in
  // order, as it arrives. Records the gap since the request's previous token (inter-token
  // latency); events without a token are ignored.
  void observe_token(const runtime::EngineEvent& event, TokenClock& clock);
  // Called once per finished generation request with its final event: time to first token,
  // end-to-end and queue time (from the engine's timings), tokens and finish reason. Front ends
  // that answer on the engine thread call it after counting the answer (request_done), so a
  // scrape that sees the request finished also sees its answer.
  void generation_done(const runtime::EngineEvent& final_event);
  // Gap between two consecutive tokens of one stream.
  void inter_token(double seconds);
  void step(const runtime::StepStats& s);
  void set_ready(bool ready);
  // Where the engine gauges come from at scrape time (may stay unset before load).
  void set_engine_stats_source(std::function<runtime::EngineStats()> source);
  // Where a classic model's figures come from at scrape time (serve of an ONNX/Paddle model).
  struct TensorStats {
    runtime::TensorBatchStats batch;
    int64_t running = 0;
    int64_t waiting = 0;
  };
  void set_tensor_stats_source(std::function<TensorStats()> source);
  // The served LoRA adapters' names in EngineStats::lora_requests order (serve --lora).
  void set_lora_names(std::vector<std::string> names);

  // The whole exposition, "text/plain; version=0.0.4".
  std::string render() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::server
