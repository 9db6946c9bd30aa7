// `sampan bench-serve`: what one request measured, and the figures a run reports from them.
// Plain data and arithmetic only (no I/O), so the unit tests check every figure against values
// they compute themselves.
//
// Times are seconds. A request's `start_s` is measured from the benchmark's start; every other
// time of a request (chunk arrivals, TTFT, E2E) from its own start.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace sampan::bench {

struct RequestRecord {
  int64_t index = 0;    // issue order, from 0
  double start_s = 0;   // when it was sent, since the benchmark's start
  double e2e_s = 0;     // until the response ended (or failed)
  // One entry per streamed chunk that carried tokens: its arrival (since start_s) and how many
  // tokens it carried (OpenAI chunks do not say: counted as 1; gRPC responses list their ids).
  std::vector<double> chunk_s;
  std::vector<int32_t> chunk_tokens;
  int64_t input_tokens = -1;   // the server's usage; -1 when it sent none
  int64_t output_tokens = -1;  // the server's usage; -1 when it sent none
  int64_t expected_input_tokens = -1;  // the synthetic prompt's target length; -1 otherwise
  int64_t max_tokens = 0;              // what the request asked for
  bool ok = false;
  // Abandoned by the client on purpose (--disconnect-fraction): neither ok nor an error, and
  // left out of every latency and throughput figure. ok is false and error_kind empty.
  bool disconnected = false;
  std::string error_kind;  // when !ok: "http_<status>", "grpc_<CODE>", timeout, connection, protocol
  std::string error;       // when !ok: a short message

  std::optional<double> ttft_s() const {
    if (chunk_s.empty()) return std::nullopt;
    return chunk_s.front();
  }
  // Tokens as the stream itself showed them (the cross-check of output_tokens).
  int64_t counted_tokens() const;
  // Output tokens the figures use: the server's usage, else the counted tokens.
  int64_t output_tokens_used() const { return output_tokens >= 0 ? output_tokens : counted_tokens(); }
  // (e2e - ttft) / (output tokens - 1); nullopt for fewer than 2 tokens or no first token.
  std::optional<double> tpot_s() const;
};

// Mean and percentiles of a sample. Percentiles interpolate linearly between the two nearest
// ranks (numpy's default): p of sorted x at position (n - 1) * p / 100.
struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;  // all 0 when count is 0
};

// `sorted` ascending, non-empty; q in [0, 100].
double percentile_sorted(const std::vector<double>& sorted, double q);
Distribution summarize(std::vector<double> values);

// Service-level objectives for goodput (seconds; unset: not checked).
struct Slo {
  std::optional<double> ttft_s, tpot_s, e2e_s;
  bool any() const { return ttft_s || tpot_s || e2e_s; }
  bool met_by(const RequestRecord& r) const;
};

// Parses "ttft:500" / "tpot:50" / "e2e:2000" (milliseconds) into `slo`; returns an error message,
// empty on success.
std::string parse_slo(const std::string& text, Slo* slo);

struct RunSummary {
  int64_t completed = 0;     // ok requests
  int64_t failed = 0;        // errors (not counting the disconnected ones)
  int64_t disconnected = 0;  // abandoned by the client on purpose (--disconnect-fraction)
  double duration_s = 0;  // from the benchmark's start to the last (not abandoned) request's end
  int64_t total_input_tokens = 0;   // of ok requests (usage)
  int64_t total_output_tokens = 0;  // of ok requests (usage, else counted)
  int64_t usage_missing = 0;        // ok requests without a usage report
  int64_t count_mismatches = 0;     // ok requests whose usage differs from the counted tokens
  double request_throughput = 0;    // completed / duration
  double input_throughput = 0;      // tokens/s
  double output_throughput = 0;     // tokens/s
  double goodput = 0;               // ok requests meeting every SLO / duration (all ok if none)
  int64_t good_requests = 0;
  Distribution ttft, tpot, itl, e2e;  // seconds, over ok requests; ITL over every gap
  std::map<std::string, int64_t> errors;  // by kind
};

// Figures of a run. `duration_s` <= 0: computed from the records (latest start + e2e of those
// not abandoned on purpose). Disconnected records are only counted.
RunSummary summarize_run(const std::vector<RequestRecord>& records, const Slo& slo,
                         double duration_s = 0);

// Output tokens per bin of `bin_s` seconds since the benchmark's start, by chunk arrival (the
// series of "throughput over time"); as many bins as the latest chunk needs. Disconnected
// requests are left out.
std::vector<double> output_tokens_per_bin(const std::vector<RequestRecord>& records, double bin_s);
// Requests of `records` finished (ok or failed, not disconnected) per bin.
std::vector<double> finished_per_bin(const std::vector<RequestRecord>& records, double bin_s);

// --disconnect-fraction: whether the client abandons request `index` on purpose, and when.
// Drawn from (seed, index) alone, so a run abandons the same requests at the same points
// whatever the timing. A quarter of the abandoned requests close the connection (or cancel the
// call) before reading any response, the rest after 1..8 streamed chunks (uniform).
struct DisconnectPlan {
  bool abandon = false;
  int after_chunks = 0;  // 0: right after sending, before reading any response
};
DisconnectPlan plan_disconnect(double fraction, uint64_t seed, int64_t index);

// Inter-arrival times of an open-loop load: gamma-distributed with shape `burstiness` and mean
// 1 / rate (burstiness 1: exponential, i.e. Poisson arrivals; < 1 burstier, > 1 more regular).
// An infinite rate gives 0 (every request at once). Deterministic for a seed.
class ArrivalGenerator {
 public:
  ArrivalGenerator(double rate, double burstiness, uint64_t seed);
  double next_gap_s();

 private:
  bool infinite_;
  std::mt19937_64 rng_;
  std::gamma_distribution<double> gamma_;
};

}  // namespace sampan::bench
