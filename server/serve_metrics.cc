#include "server/serve_metrics.h"

#include <exception>
#include <mutex>

#include "server/gateway.h"
#include "server/metrics.h"

namespace sampan::server {

namespace {

// Latency buckets on a 1-2.5-5 ladder: readable bounds, and dense enough below a second where
// TTFT and ITL targets live.
const std::vector<double> kRequestLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    0.5,   1,      2.5,   5,    10,    20,   30,  60};
const std::vector<double> kTokenLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                                  0.1,   0.15,   0.2,   0.3,  0.5,   1,    2.5,
                                                  5,     10};

// Listed so every finish reason shows as a 0 series from the start (dashboards need no "absent").
constexpr runtime::EngineFinish kAllFinishes[] = {runtime::EngineFinish::kStop, runtime::EngineFinish::kLength,
                                                  runtime::EngineFinish::kCancelled,
                                                  runtime::EngineFinish::kTimeout, runtime::EngineFinish::kError};

}  // namespace

struct ServeMetrics::Impl {
  metrics::Registry reg;
  metrics::Family<metrics::Counter>& requests;
  metrics::Family<metrics::Counter>& finished;
  metrics::Counter& prompt_tokens;
  metrics::Counter& generation_tokens;
  metrics::Histogram& ttft;
  metrics::Histogram& itl;
  metrics::Histogram& e2e;
  metrics::Histogram& queue;
  metrics::Gauge& running;
  metrics::Gauge& waiting;
  metrics::Gauge& kv_usage;
  metrics::Gauge& kv_used;
  metrics::Gauge& kv_total;
  metrics::Gauge& kv_bytes;
  metrics::Counter& prefix_queries;
  metrics::Counter& prefix_hits;
  metrics::Counter& preemptions;
  metrics::Counter& graph_replays;
  metrics::Histogram& batch_size;
  metrics::Histogram& batch_tokens;
  metrics::Gauge& ready;
  metrics::Family<metrics::Counter>& lora_requests;
  metrics::Counter& tensor_runs;
  metrics::Counter& tensor_requests;
  metrics::Counter& tensor_rows;

  std::mutex source_mu;
  std::function<runtime::EngineStats()> source;
  std::function<TensorStats()> tensor_source;
  std::vector<std::string> lora_names;  // by adapter index

  Impl()
      : requests(reg.counter("sampan:requests_total", "HTTP and gRPC requests by API and status code.",
                             {"api", "code"})),
        finished(reg.counter("sampan:request_finished_total", "Generation requests by finish reason.",
                             {"finish_reason"})),
        prompt_tokens(reg.counter("sampan:prompt_tokens_total", "Prompt tokens of finished requests.").get()),
        generation_tokens(
            reg.counter("sampan:generation_tokens_total", "Generated tokens of finished requests.").get()),
        ttft(reg.histogram("sampan:time_to_first_token_seconds",
                           "Time from arrival to the first generated token.", kRequestLatencyBuckets)
                 .get()),
        itl(reg.histogram("sampan:inter_token_latency_seconds", "Gap between consecutive tokens of a stream.",
                          kTokenLatencyBuckets)
                .get()),
        e2e(reg.histogram("sampan:e2e_request_latency_seconds", "Time from arrival to the final event.",
                          kRequestLatencyBuckets)
                .get()),
        queue(reg.histogram("sampan:request_queue_time_seconds", "Time from arrival to first being scheduled.",
                            kRequestLatencyBuckets)
                  .get()),
        running(reg.gauge("sampan:num_requests_running", "Requests in the running batch.").get()),
        waiting(reg.gauge("sampan:num_requests_waiting", "Requests waiting to be scheduled.").get()),
        kv_usage(reg.gauge("sampan:kv_cache_usage_ratio", "Used KV cache blocks / total blocks (0..1).").get()),
        kv_used(reg.gauge("sampan:kv_cache_blocks_used", "KV cache blocks in use.").get()),
        kv_total(reg.gauge("sampan:kv_cache_blocks_total", "KV cache blocks allocated at load.").get()),
        kv_bytes(reg.gauge("sampan:kv_cache_bytes", "Bytes of the KV cache pools (all layers, in the cache's format).").get()),
        prefix_queries(reg.counter("sampan:prefix_cache_queries_total",
                                   "Prompt tokens looked up in the prefix cache.")
                           .get()),
        prefix_hits(reg.counter("sampan:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.").get()),
        preemptions(reg.counter("sampan:num_preemptions_total",
                                "Sequences preempted for lack of KV blocks (recomputed later).")
                        .get()),
        graph_replays(reg.counter("sampan:cuda_graph_replays_total",
                                  "Engine steps run as one replayed CUDA graph (decode steps on a GPU).")
                          .get()),
        batch_size(reg.histogram("sampan:batch_size", "Sequences per engine step.",
                                 metrics::exponential_buckets(1, 2, 10))
                       .get()),
        batch_tokens(reg.histogram("sampan:batch_tokens", "Tokens per engine step.",
                                   metrics::exponential_buckets(1, 2, 15))
                         .get()),
        ready(reg.gauge("sampan:server_ready", "1 when the model is loaded and the server accepts work.").get()),
        lora_requests(reg.counter("sampan:lora_requests_total",
                                  "Generation requests accepted per LoRA adapter (serve --lora).",
                                  {"adapter"})),
        tensor_runs(reg.counter("sampan:tensor_runs_total",
                                "Classic-model executor runs (a dynamically merged batch counts once).")
                        .get()),
        tensor_requests(reg.counter("sampan:tensor_requests_total",
                                    "Classic-model requests answered by those runs.")
                            .get()),
        tensor_rows(reg.counter("sampan:tensor_rows_total",
                                "First-dimension rows (batch entries) of those runs.")
                        .get()) {
    for (runtime::EngineFinish f : kAllFinishes) finished.labels({finish_reason(f)});
    reg.add_collect_hook([this] { collect(); });
  }

  void collect() {
    std::function<runtime::EngineStats()> src;
    std::function<TensorStats()> tsrc;
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> lock(source_mu);
      src = source;
      tsrc = tensor_source;
      names = lora_names;
    }
    if (tsrc) {
      const TensorStats t = tsrc();
      tensor_runs.mirror(static_cast<double>(t.batch.runs));
      tensor_requests.mirror(static_cast<double>(t.batch.requests));
      tensor_rows.mirror(static_cast<double>(t.batch.rows));
      running.set(static_cast<double>(t.running));
      waiting.set(static_cast<double>(t.waiting));
    }
    if (!src) return;
    runtime::EngineStats s;
    try {
      s = src();
    } catch (const std::exception&) {
      return;  // a scrape must not fail because the engine is going away: keep the last values
    }
    running.set(s.running);
    waiting.set(s.waiting);
    kv_usage.set(s.kv_usage);
    kv_used.set(static_cast<double>(s.kv_blocks_used));
    kv_total.set(static_cast<double>(s.kv_blocks_total));
    kv_bytes.set(static_cast<double>(s.kv_cache_bytes));
    prefix_queries.mirror(static_cast<double>(s.prefix_query_tokens));
    prefix_hits.mirror(static_cast<double>(s.prefix_hit_tokens));
    preemptions.mirror(static_cast<double>(s.preemptions));
    graph_replays.mirror(static_cast<double>(s.cuda_graph_replays));
    for (size_t i = 0; i < names.size() && i < s.lora_requests.size(); ++i) {
      lora_requests.labels({names[i]}).mirror(static_cast<double>(s.lora_requests[i]));
    }
  }
};

ServeMetrics::ServeMetrics() : impl_(std::make_unique<Impl>()) {}
ServeMetrics::~ServeMetrics() = default;

void ServeMetrics::request_done(const std::string& api, int code) {
  impl_->requests.labels({api, std::to_string(code)}).inc();
}

void ServeMetrics::generation_done(const runtime::EngineEvent& final_event) {
  Impl& m = *impl_;
  m.finished.labels({finish_reason(final_event.finish)}).inc();
  m.prompt_tokens.inc(static_cast<double>(final_event.usage.prompt_tokens));
  m.generation_tokens.inc(static_cast<double>(final_event.usage.completion_tokens));
  const runtime::EngineTimings& t = final_event.timings;
  // A request that produced no token has no TTFT; one never scheduled (cancelled or refused
  // while waiting) has no queue time worth recording.
  if (final_event.usage.completion_tokens > 0 && t.first_token_s > 0) m.ttft.observe(t.first_token_s);
  if (t.queue_s > 0) m.queue.observe(t.queue_s);
  m.e2e.observe(t.total_s);
}

void ServeMetrics::observe_token(const runtime::EngineEvent& ev, TokenClock& clock) {
  if (ev.token < 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (clock.last_token) {
    inter_token(std::chrono::duration<double>(now - *clock.last_token).count());
  }
  clock.last_token = now;
}

void ServeMetrics::inter_token(double seconds) { impl_->itl.observe(seconds); }

void ServeMetrics::step(const runtime::StepStats& s) {
  impl_->batch_size.observe(s.n_sequences);
  impl_->batch_tokens.observe(static_cast<double>(s.n_tokens));
}

void ServeMetrics::set_ready(bool ready) { impl_->ready.set(ready ? 1 : 0); }

void ServeMetrics::set_tensor_stats_source(std::function<TensorStats()> source) {
  std::lock_guard<std::mutex> lock(impl_->source_mu);
  impl_->tensor_source = std::move(source);
}

void ServeMetrics::set_engine_stats_source(std::function<runtime::EngineStats()> source) {
  std::lock_guard<std::mutex> lock(impl_->source_mu);
  impl_->source = std::move(source);
}

void ServeMetrics::set_lora_names(std::vector<std::string> names) {
  {
    std::lock_guard<std::mutex> lock(impl_->source_mu);
    impl_->lora_names = names;
  }
  // Every adapter's series shows from the start (0), not only after its first request.
  for (const std::string& n : names) impl_->lora_requests.labels({n});
}

std::string ServeMetrics::render() const { return impl_->reg.render(); }

}  // namespace sampan::server
