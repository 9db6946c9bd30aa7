#include "clients/bench_serve/bench_serve_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace sampan::bench {

int64_t RequestRecord::counted_tokens() const {
  return std::accumulate(chunk_tokens.begin(), chunk_tokens.end(), int64_t{0});
}

std::optional<double> RequestRecord::tpot_s() const {
  const auto ttft = ttft_s();
  const int64_t n = output_tokens_used();
  if (!ttft || n < 2) return std::nullopt;
  return (e2e_s - *ttft) / static_cast<double>(n - 1);
}

double percentile_sorted(const std::vector<double>& sorted, double q) {
  const double pos = static_cast<double>(sorted.size() - 1) * q / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

Distribution summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int64_t>(values.size());
  // Summed in ascending order: small latencies are not lost next to large ones.
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(d.count);
  d.p50 = percentile_sorted(values, 50);
  d.p90 = percentile_sorted(values, 90);
  d.p99 = percentile_sorted(values, 99);
  d.min = values.front();
  d.max = values.back();
  return d;
}

bool Slo::met_by(const RequestRecord& r) const {
  if (!r.ok) return false;
  if (ttft_s) {
    const auto t = r.ttft_s();
    if (!t || *t > *ttft_s) return false;
  }
  if (tpot_s) {
    // A one-token answer has no TPOT: nothing to miss.
    const auto t = r.tpot_s();
    if (t && *t > *tpot_s) return false;
  }
  if (e2e_s && r.e2e_s > *e2e_s) return false;
  return true;
}

std::string parse_slo(const std::string& text, Slo* slo) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return "--goodput: expected KEY:MILLISECONDS (ttft, tpot or e2e), got '" + text + "'";
  }
  const std::string key = text.substr(0, colon);
  const std::string value = text.substr(colon + 1);
  double ms = 0;
  try {
    size_t used = 0;
    ms = std::stod(value, &used);
    if (used != value.size()) throw std::invalid_argument(value);
  } catch (const std::exception&) {
    return "--goodput: '" + value + "' is not a number of milliseconds (in '" + text + "')";
  }
  if (!(ms > 0) || !std::isfinite(ms)) {
    return "--goodput: " + key + " must be a positive number of milliseconds (got " + value + ")";
  }
  const double s = ms / 1000.0;
  if (key == "ttft") slo->ttft_s = s;
  else if (key == "tpot") slo->tpot_s = s;
  else if (key == "e2e") slo->e2e_s = s;
  else return "--goodput: unknown key '" + key + "' (ttft, tpot or e2e)";
  return "";
}

RunSummary summarize_run(const std::vector<RequestRecord>& records, const Slo& slo,
                         double duration_s) {
  RunSummary s;
  std::vector<double> ttft, tpot, itl, e2e;
  double end = 0;
  for (const RequestRecord& r : records) {
    if (r.disconnected) {
      ++s.disconnected;
      continue;
    }
    end = std::max(end, r.start_s + r.e2e_s);
    if (!r.ok) {
      ++s.failed;
      ++s.errors[r.error_kind.empty() ? "unknown" : r.error_kind];
      continue;
    }
    ++s.completed;
    if (r.input_tokens >= 0) s.total_input_tokens += r.input_tokens;
    s.total_output_tokens += r.output_tokens_used();
    if (r.input_tokens < 0 || r.output_tokens < 0) ++s.usage_missing;
    if (r.output_tokens >= 0 && r.output_tokens != r.counted_tokens()) ++s.count_mismatches;
    if (const auto t = r.ttft_s()) ttft.push_back(*t);
    if (const auto t = r.tpot_s()) tpot.push_back(*t);
    for (size_t i = 1; i < r.chunk_s.size(); ++i) itl.push_back(r.chunk_s[i] - r.chunk_s[i - 1]);
    e2e.push_back(r.e2e_s);
    if (!slo.any() || slo.met_by(r)) ++s.good_requests;
  }
  s.duration_s = duration_s > 0 ? duration_s : end;
  if (s.duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / s.duration_s;
    s.input_throughput = static_cast<double>(s.total_input_tokens) / s.duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / s.duration_s;
    s.goodput = static_cast<double>(s.good_requests) / s.duration_s;
  }
  s.ttft = summarize(std::move(ttft));
  s.tpot = summarize(std::move(tpot));
  s.itl = summarize(std::move(itl));
  s.e2e = summarize(std::move(e2e));
  return s;
}

namespace {

void add_to_bin(std::vector<double>& bins, double t, double bin_s, double amount) {
  if (!(t >= 0) || !std::isfinite(t)) return;
  const size_t b = static_cast<size_t>(t / bin_s);
  if (bins.size() <= b) bins.resize(b + 1, 0.0);
  bins[b] += amount;
}

}  // namespace

std::vector<double> output_tokens_per_bin(const std::vector<RequestRecord>& records, double bin_s) {
  std::vector<double> bins;
  for (const RequestRecord& r : records) {
    if (r.disconnected) continue;
    for (size_t i = 0; i < r.chunk_s.size(); ++i) {
      add_to_bin(bins, r.start_s + r.chunk_s[i], bin_s, r.chunk_tokens[i]);
    }
  }
  return bins;
}

std::vector<double> finished_per_bin(const std::vector<RequestRecord>& records, double bin_s) {
  std::vector<double> bins;
  for (const RequestRecord& r : records) {
    if (!r.disconnected) add_to_bin(bins, r.start_s + r.e2e_s, bin_s, 1.0);
  }
  return bins;
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

DisconnectPlan plan_disconnect(double fraction, uint64_t seed, int64_t index) {
  DisconnectPlan p;
  if (!(fraction > 0)) return p;
  // Two independent draws from one hash of (seed, index): the decision and the point.
  const uint64_t h = splitmix64(splitmix64(seed ^ 0xd1b54a32d192ed03ull) ^ static_cast<uint64_t>(index));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  if (!(u < fraction)) return p;
  p.abandon = true;
  const uint64_t g = splitmix64(h);
  p.after_chunks = (g & 3) == 0 ? 0 : 1 + static_cast<int>((g >> 2) % 8);
  return p;
}

ArrivalGenerator::ArrivalGenerator(double rate, double burstiness, uint64_t seed)
    : infinite_(!std::isfinite(rate)),
      rng_(seed),
      // Mean shape * scale = 1 / rate; variance shape * scale^2 = 1 / (rate^2 * burstiness).
      gamma_(burstiness, infinite_ ? 1.0 : 1.0 / (rate * burstiness)) {}

double ArrivalGenerator::next_gap_s() { return infinite_ ? 0.0 : gamma_(rng_); }

}  // namespace sampan::bench
