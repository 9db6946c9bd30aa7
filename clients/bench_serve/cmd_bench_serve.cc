// sampan bench-serve: the load-test tool. Sends streaming generation requests to any
// OpenAI-compatible HTTP server or to a sampan.v1.Generate gRPC server, open loop (gamma / Poisson
// arrivals at --request-rate) or closed loop (--concurrency clients back to back), and reports
// throughput, TTFT / TPOT / ITL / E2E percentiles, goodput and errors by kind (docs/BENCH_SERVE.md).
//
// Exit codes: 0 when at least one request succeeded (failures are counted in the report), 1 when
// the server cannot be reached or every request failed, 2 for bad flags.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "clients/bench_serve/bench_serve_cli.h"
#include "clients/bench_serve/bench_serve_client.h"
#include "clients/bench_serve/bench_serve_report.h"
#include "engine/core/error.h"

namespace sampan::cli {
namespace {

using bench::Clock;

struct BenchFlags {
  std::string backend = "openai-completions";
  std::string url, grpc, endpoint, model, api_key, ca_cert, extra_body;
  bool grpc_tls = false, insecure = false;
  std::string request_rate = "inf";
  double rate = std::numeric_limits<double>::infinity();  // parsed from request_rate
  double burstiness = 1.0;
  int64_t concurrency = 0;      // > 0: closed loop
  int64_t max_concurrency = 0;  // open loop cap; 0: none
  int64_t num_requests = -1;    // -1: default
  double duration_s = 0;        // > 0: stop issuing after this long
  uint64_t seed = 0;
  std::string dataset = "synthetic";
  int64_t input_len = 128, output_len = 128;
  double input_range = 0, output_range = 0;
  bool ignore_eos = false;
  double timeout_s = 300, connect_timeout_s = 10;
  double disconnect_fraction = 0;  // abandon this fraction of requests on purpose
  std::vector<std::string> goodput;
  bench::Slo slo;
  std::string json_path, html_path;
  bool progress = false;
};

[[noreturn]] void bad_flag(const std::string& flag, const std::string& message) {
  throw CLI::ValidationError(flag, message);
}

// Semantic checks, run while CLI11 parses so that they end as usage errors (exit 2).
void validate(BenchFlags& f, const CLI::App& cmd) {
  const bool http = f.backend != "grpc-generate";
  if (http && f.url.empty()) bad_flag("--url", "required with --backend " + f.backend);
  if (!http && f.grpc.empty()) bad_flag("--grpc", "required with --backend grpc-generate");
  if (http && !f.grpc.empty()) bad_flag("--grpc", "only with --backend grpc-generate");
  if (!http && !f.url.empty()) bad_flag("--url", "not with --backend grpc-generate (use --grpc)");
  if (http && f.url.rfind("http://", 0) != 0 && f.url.rfind("https://", 0) != 0) {
    bad_flag("--url", "expected http://HOST:PORT or https://HOST:PORT, got '" + f.url + "'");
  }
  if (!f.extra_body.empty()) {
    nlohmann::json extra;
    try {
      extra = nlohmann::json::parse(f.extra_body);
    } catch (const std::exception&) {
      bad_flag("--extra-body", "not valid JSON");
    }
    if (!extra.is_object()) bad_flag("--extra-body", "expected a JSON object");
  }
  if (f.request_rate == "inf") {
    f.rate = std::numeric_limits<double>::infinity();
  } else {
    try {
      size_t used = 0;
      f.rate = std::stod(f.request_rate, &used);
      if (used != f.request_rate.size()) throw std::invalid_argument(f.request_rate);
    } catch (const std::exception&) {
      bad_flag("--request-rate", "expected requests per second or 'inf', got '" +
                                     f.request_rate + "'");
    }
    if (!(f.rate > 0)) bad_flag("--request-rate", "must be > 0");
  }
  if (!(f.burstiness > 0) || !std::isfinite(f.burstiness)) bad_flag("--burstiness", "must be > 0");
  if (f.concurrency < 0) bad_flag("--concurrency", "must be >= 1");
  if (f.concurrency > 0 && cmd.count("--request-rate") > 0) {
    bad_flag("--concurrency", "closed loop: not with --request-rate (open loop)");
  }
  if (f.concurrency > 0 && f.max_concurrency > 0) {
    bad_flag("--max-concurrency", "caps the open loop; with --concurrency it means nothing");
  }
  if (f.max_concurrency < 0) bad_flag("--max-concurrency", "must be >= 1");
  if (cmd.count("--num-requests") > 0 && f.num_requests < 1) {
    bad_flag("--num-requests", "must be >= 1");
  }
  if (cmd.count("--duration") > 0 && !(f.duration_s > 0)) bad_flag("--duration", "must be > 0");
  if (f.input_len < 1) bad_flag("--input-len", "must be >= 1");
  if (f.output_len < 1) bad_flag("--output-len", "must be >= 1");
  if (!(f.input_range >= 0 && f.input_range < 1)) bad_flag("--input-len-range", "must be in [0, 1)");
  if (!(f.output_range >= 0 && f.output_range < 1)) {
    bad_flag("--output-len-range", "must be in [0, 1)");
  }
  if (!(f.timeout_s > 0)) bad_flag("--timeout", "must be > 0");
  if (!(f.disconnect_fraction >= 0 && f.disconnect_fraction <= 1)) {
    bad_flag("--disconnect-fraction", "must be in [0, 1]");
  }
  if (!(f.connect_timeout_s > 0)) bad_flag("--connect-timeout", "must be > 0");
  for (const std::string& g : f.goodput) {
    const std::string err = bench::parse_slo(g, &f.slo);
    if (!err.empty()) throw CLI::ValidationError(err);
  }
  if (!f.extra_body.empty() && !http) bad_flag("--extra-body", "only for the HTTP backends");
}

bench::Backend backend_of(const std::string& name) {
  if (name == "openai-chat") return bench::Backend::kOpenAiChat;
  if (name == "grpc-generate") return bench::Backend::kGrpcGenerate;
  return bench::Backend::kOpenAiCompletions;
}

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

// What the driver and the request callbacks share.
struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  int64_t in_flight = 0;
  int64_t issued = 0;
  int64_t failed = 0;
  int64_t disconnected = 0;
  std::vector<bench::RequestRecord> records;
};

class ProgressBar {
 public:
  ProgressBar(Progress& p, int64_t total, double duration_s, Clock::time_point t0)
      : p_(p), total_(total), duration_s_(duration_s), t0_(t0) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ProgressBar() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    draw();
    std::fputc('\n', stderr);
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) draw();
  }
  void draw() {
    int64_t done = 0, in_flight = 0, failed = 0, disconnected = 0;
    {
      std::lock_guard lock(p_.mu);
      done = static_cast<int64_t>(p_.records.size());
      in_flight = p_.in_flight;
      failed = p_.failed;
      disconnected = p_.disconnected;
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0_).count();
    double frac = 0;
    if (total_ > 0) frac = static_cast<double>(done) / static_cast<double>(total_);
    if (duration_s_ > 0) frac = std::max(frac, std::min(1.0, elapsed / duration_s_));
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(std::min(1.0, frac) * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    const std::string disc =
        disconnected > 0 ? fmt::format("  {} disconnected", disconnected) : std::string();
    std::fprintf(stderr, "\r[%s] %3.0f%%  %lld done  %lld in flight  %lld failed%s  %.1f s ",
                 bar.c_str(), frac * 100, static_cast<long long>(done),
                 static_cast<long long>(in_flight), static_cast<long long>(failed), disc.c_str(),
                 elapsed);
    std::fflush(stderr);
  }

  Progress& p_;
  int64_t total_;
  double duration_s_;
  Clock::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SAMPAN_CHECK(out.good(), ErrorCode::kIo, "cannot write '{}'", path);
  out << text;
  out.close();
  SAMPAN_CHECK(!out.fail(), ErrorCode::kIo, "error writing '{}'", path);
}

std::string load_text(const BenchFlags& f, int64_t cap) {
  if (f.concurrency > 0) return fmt::format("closed loop, concurrency {}", f.concurrency);
  std::string s = std::isinf(f.rate) ? std::string("open loop, all at once")
                                     : fmt::format("open loop, {:g} req/s", f.rate);
  if (!std::isinf(f.rate) && f.burstiness != 1.0) s += fmt::format(", burstiness {:g}", f.burstiness);
  if (cap > 0) s += fmt::format(", max concurrency {}", cap);
  return s;
}

int run_bench_serve(const BenchFlags& f) {
  bench::ClientOptions co;
  co.backend = backend_of(f.backend);
  co.url = f.url;
  co.endpoint = f.endpoint;
  co.grpc_target = f.grpc;
  co.grpc_tls = f.grpc_tls;
  co.model = f.model;
  co.api_key = f.api_key;
  co.ignore_eos = f.ignore_eos;
  co.extra_body = f.extra_body;
  co.ca_cert = f.ca_cert;
  co.insecure = f.insecure;
  co.timeout_s = f.timeout_s;
  co.disconnect_fraction = f.disconnect_fraction;
  co.disconnect_seed = f.seed;

  bench::Workload workload =
      f.dataset == "synthetic"
          ? bench::Workload::synthetic({f.input_len, f.output_len, f.input_range, f.output_range,
                                        f.seed})
          : bench::Workload::from_jsonl(f.dataset, f.output_len);
  SAMPAN_CHECK(!(co.backend == bench::Backend::kOpenAiCompletions && workload.has_chat_prompts()),
               ErrorCode::kInvalidArgument,
               "--dataset {}: has \"messages\" prompts; use --backend openai-chat or grpc-generate",
               f.dataset);
  int64_t num = f.num_requests;
  if (num < 0 && f.duration_s <= 0) {
    num = workload.dataset_size() > 0 ? static_cast<int64_t>(workload.dataset_size()) : 100;
  }

  std::unique_ptr<bench::Client> client = co.backend == bench::Backend::kGrpcGenerate
                                              ? bench::make_grpc_client(co)
                                              : bench::make_http_client(co);
  client->check_reachable(f.connect_timeout_s);
  if (co.model.empty() && co.backend != bench::Backend::kGrpcGenerate) {
    co.model = client->discover_model(f.connect_timeout_s);
    // The body is built from the client's options: a client that knows the model.
    if (!co.model.empty()) client = bench::make_http_client(co);
  }

  const int64_t cap = f.concurrency > 0 ? f.concurrency : f.max_concurrency;
  // Every HTTP request in flight holds a socket: an open loop at a high rate needs more than the
  // usual 1024 descriptors.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  bench::ArrivalGenerator arrivals(f.concurrency > 0 ? std::numeric_limits<double>::infinity()
                                                     : f.rate,
                                   f.burstiness, f.seed ^ 0x9e3779b97f4a7c15ull);
  auto progress = std::make_shared<Progress>();
  const bool show_progress = f.progress || isatty(STDERR_FILENO);
  g_interrupted = false;
  signal(SIGINT, on_sigint);

  const Clock::time_point t0 = Clock::now();
  const Clock::time_point stop_at =
      f.duration_s > 0 ? t0 + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(f.duration_s))
                       : Clock::time_point::max();
  {
    std::optional<ProgressBar> bar;
    if (show_progress) bar.emplace(*progress, num, f.duration_s, t0);
    Clock::time_point next = t0;
    for (int64_t i = 0; num < 0 || i < num; ++i) {
      bench::Prompt prompt = workload.next();
      if (i > 0) {
        next += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(arrivals.next_gap_s()));
      }
      std::unique_lock lock(progress->mu);
      // Sleeps until the arrival time and a free slot, waking for Ctrl-C now and then.
      auto ready = [&] {
        return g_interrupted.load() || Clock::now() >= stop_at ||
               (Clock::now() >= next && (cap <= 0 || progress->in_flight < cap));
      };
      while (!ready()) {
        progress->cv.wait_until(lock, std::min({next > Clock::now() ? next : Clock::now() +
                                                    std::chrono::milliseconds(100),
                                                stop_at, Clock::now() + std::chrono::milliseconds(100)}));
      }
      if (g_interrupted.load() || Clock::now() >= stop_at) break;
      ++progress->in_flight;
      ++progress->issued;
      lock.unlock();
      client->start(i, prompt, t0, [progress](bench::RequestRecord r) {
        std::lock_guard lock(progress->mu);
        if (r.disconnected) ++progress->disconnected;
        else if (!r.ok) ++progress->failed;
        progress->records.push_back(std::move(r));
        --progress->in_flight;
        progress->cv.notify_all();
      });
    }
    std::unique_lock lock(progress->mu);
    progress->cv.wait(lock, [&] { return progress->in_flight == 0; });
  }
  signal(SIGINT, SIG_DFL);
  client.reset();

  std::vector<bench::RequestRecord> records = std::move(progress->records);
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  const bench::RunSummary summary = bench::summarize_run(records, f.slo);

  bench::RunInfo info;
  info.backend = f.backend;
  info.target = co.backend == bench::Backend::kGrpcGenerate ? f.grpc : f.url;
  info.model = co.model;
  info.dataset = f.dataset == "synthetic"
                     ? fmt::format("synthetic, input {} (±{:g}), output {} (±{:g})", f.input_len,
                                   f.input_range, f.output_len, f.output_range)
                     : f.dataset;
  info.load = load_text(f, cap);
  info.disconnect_fraction = f.disconnect_fraction;
  info.config = {{"backend", f.backend},   {"url", f.url},
                 {"grpc", f.grpc},         {"endpoint", f.endpoint},
                 {"model", co.model},      {"request_rate", std::isinf(f.rate) ? -1.0 : f.rate},
                 {"burstiness", f.burstiness}, {"concurrency", f.concurrency},
                 {"max_concurrency", f.max_concurrency}, {"num_requests", num},
                 {"duration_s", f.duration_s}, {"seed", f.seed},
                 {"dataset", f.dataset},   {"input_len", f.input_len},
                 {"output_len", f.output_len}, {"input_len_range", f.input_range},
                 {"output_len_range", f.output_range}, {"ignore_eos", f.ignore_eos},
                 {"timeout_s", f.timeout_s}, {"goodput", f.goodput},
                 {"disconnect_fraction", f.disconnect_fraction},
                 {"interrupted", g_interrupted.load()}};

  std::fputs(bench::format_table(info, summary).c_str(), stdout);
  std::fflush(stdout);
  if (!f.json_path.empty()) {
    write_file(f.json_path,
               bench::report_json(info, summary, records)
                   .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                   "\n");
  }
  if (!f.html_path.empty()) write_file(f.html_path, bench::report_html(info, summary, records));

  if (summary.completed == 0 && summary.failed > 0) {
    const auto& first = *std::find_if(records.begin(), records.end(),
                                      [](const auto& r) { return !r.ok && !r.disconnected; });
    fail(ErrorCode::kUnavailable, "all {} requests failed (first: {}: {})", summary.failed,
         first.error_kind, first.error);
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_serve(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand(
      "bench-serve", "Load-test an OpenAI-compatible HTTP or Sampan gRPC endpoint");
  cmd->add_option("--backend", f->backend, "openai-completions | openai-chat | grpc-generate")
      ->check(CLI::IsMember({"openai-completions", "openai-chat", "grpc-generate"}));
  cmd->add_option("--url", f->url, "HTTP backends: http[s]://HOST:PORT[/PREFIX]");
  cmd->add_option("--endpoint", f->endpoint,
                  "HTTP path after the URL (default /v1/completions or /v1/chat/completions)");
  cmd->add_option("--grpc", f->grpc, "grpc-generate: HOST:PORT");
  cmd->add_flag("--grpc-tls", f->grpc_tls, "grpc-generate over TLS");
  cmd->add_option("--model", f->model,
                  "Model name to request (default: the first of GET /v1/models; gRPC: the "
                  "server's only model)");
  cmd->add_option("--api-key", f->api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--ca-cert", f->ca_cert, "TLS: trust this PEM certificate file");
  cmd->add_flag("--insecure", f->insecure, "HTTPS: do not verify the server certificate");
  cmd->add_option("--extra-body", f->extra_body,
                  "HTTP: a JSON object merged into every request body (e.g. sampling fields)");
  cmd->add_option("--request-rate", f->request_rate,
                  "Open loop: requests per second (default inf: all at once)");
  cmd->add_option("--burstiness", f->burstiness,
                  "Open loop: gamma shape of the inter-arrival times (1 = Poisson)");
  cmd->add_option("--concurrency", f->concurrency,
                  "Closed loop: this many clients, each sending its next request when the "
                  "previous one ends");
  cmd->add_option("--max-concurrency", f->max_concurrency,
                  "Open loop: at most this many requests in flight");
  cmd->add_option("--num-requests", f->num_requests,
                  "Requests to send (default 100, or the dataset's size; unlimited with "
                  "--duration alone)");
  cmd->add_option("--duration", f->duration_s, "Stop sending after this many seconds");
  cmd->add_option("--seed", f->seed, "Seed of the prompts, lengths and arrivals");
  cmd->add_option("--dataset", f->dataset, "'synthetic' (default) or FILE.jsonl");
  cmd->add_option("--input-len", f->input_len, "Synthetic: mean prompt length in tokens");
  cmd->add_option("--output-len", f->output_len,
                  "Mean max_tokens (synthetic), or max_tokens of dataset lines without one");
  cmd->add_option("--input-len-range", f->input_range,
                  "Synthetic: lengths uniform in input-len * [1 - r, 1 + r]");
  cmd->add_option("--output-len-range", f->output_range,
                  "Synthetic: max_tokens uniform in output-len * [1 - r, 1 + r]");
  cmd->add_flag("--ignore-eos", f->ignore_eos,
                "Ask the server to ignore end-of-sequence (exactly max_tokens tokens)");
  cmd->add_option("--timeout", f->timeout_s, "Per-request timeout in seconds (default 300)");
  cmd->add_option("--disconnect-fraction", f->disconnect_fraction,
                  "Abandon this fraction (0..1) of the requests on purpose: close the connection "
                  "(cancel the gRPC call) before reading a response or after 1..8 chunks; "
                  "counted apart, not as errors");
  cmd->add_option("--connect-timeout", f->connect_timeout_s,
                  "Seconds to wait for the server before starting (default 10)");
  cmd->add_option("--goodput", f->goodput,
                  "SLOs for goodput, KEY:MS (ttft, tpot, e2e), e.g. --goodput ttft:500 tpot:50");
  cmd->add_option("--json", f->json_path, "Write every figure and per-request record as JSON");
  cmd->add_option("--html", f->html_path, "Write a self-contained HTML report (inline SVG)");
  cmd->add_flag("--progress", f->progress, "Show the progress bar even when stderr is no TTY");
  cmd->callback([f, cmd] { validate(*f, *cmd); });
  return [f] { return run_bench_serve(*f); };
}

}  // namespace sampan::cli
