// The in-house Prometheus registry and ServeMetrics: exact text for a tiny registry, structural
// checks through a parser written here (independent of the renderer), exact totals under
// concurrent updates, and, when the Python package is installed, the official prometheus_client
// parser reading the same exposition.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "server/metrics.h"
#include "server/serve_metrics.h"

using namespace sampan::server;
using namespace sampan::server::metrics;

namespace {

// ---- a plain parser of the text exposition format 0.0.4 -------------------------------------

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in written order, unescaped
  double value = 0;
  size_t family = 0;  // index into Parsed::families

  std::string label(const std::string& k) const {
    for (const auto& [n, v] : labels) {
      if (n == k) return v;
    }
    return "<absent>";
  }
};

struct ParsedFamily {
  std::string name, help, type;
};

struct Parsed {
  std::vector<ParsedFamily> families;  // in order of their TYPE lines
  std::vector<Sample> samples;
  std::map<std::string, std::string> type_of;

  // The value of the one sample with this name and these labels (all of them); fails otherwise.
  double value(const std::string& name, const std::map<std::string, std::string>& want = {}) const {
    const Sample* found = nullptr;
    for (const Sample& s : samples) {
      if (s.name != name || s.labels.size() != want.size()) continue;
      bool match = true;
      for (const auto& [k, v] : want) match = match && s.label(k) == v;
      if (!match) continue;
      INFO(name);
      REQUIRE(found == nullptr);
      found = &s;
    }
    INFO("sample " << name);
    REQUIRE(found != nullptr);
    return found->value;
  }
};

double parse_number(const std::string& s) {
  if (s == "+Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  INFO("value '" << s << "'");
  REQUIRE(!s.empty());
  REQUIRE(end == s.c_str() + s.size());
  // The format's own spellings are the only non-finite ones allowed.
  REQUIRE(std::isfinite(v));
  return v;
}

std::string unescape(const std::string& s, bool quotes) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    REQUIRE(i + 1 < s.size());
    const char c = s[++i];
    if (c == '\\') out += '\\';
    else if (c == 'n') out += '\n';
    else if (c == '"' && quotes) out += '"';
    else FAIL("bad escape \\" << c);
  }
  return out;
}

bool is_name(const std::string& s, bool colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (colon && c == ':') ||
                    (i > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  return true;
}

Sample parse_sample(const std::string& line) {
  Sample s;
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  s.name = line.substr(0, i);
  REQUIRE(is_name(s.name, true));
  REQUIRE(i < line.size());
  if (line[i] == '{') {
    ++i;
    while (true) {
      const size_t eq = line.find('=', i);
      REQUIRE(eq != std::string::npos);
      const std::string key = line.substr(i, eq - i);
      REQUIRE(is_name(key, false));
      REQUIRE(eq + 1 < line.size());
      REQUIRE(line[eq + 1] == '"');
      size_t j = eq + 2;
      std::string raw;
      while (j < line.size() && line[j] != '"') {
        if (line[j] == '\\') raw += line[j++];
        REQUIRE(j < line.size());
        raw += line[j++];
      }
      REQUIRE(j < line.size());
      s.labels.emplace_back(key, unescape(raw, true));
      i = j + 1;
      REQUIRE(i < line.size());
      if (line[i] == ',') {
        ++i;
        continue;
      }
      REQUIRE(line[i] == '}');
      ++i;
      break;
    }
  }
  REQUIRE(i < line.size());
  REQUIRE(line[i] == ' ');
  const std::string rest = line.substr(i + 1);
  REQUIRE(rest.find(' ') == std::string::npos);  // no timestamps written
  s.value = parse_number(rest);
  return s;
}

// Parses and checks the structure: HELP then TYPE per family, samples only under a declared
// family with its allowed suffixes, no duplicate series, histograms cumulative with a final
// +Inf bucket equal to _count.
Parsed parse_exposition(const std::string& text) {
  Parsed p;
  REQUIRE((text.empty() || text.back() == '\n'));
  std::istringstream in(text);
  std::string line;
  std::string pending_help_name, pending_help;
  std::set<std::string> series_seen;
  while (std::getline(in, line)) {
    INFO("line: " << line);
    REQUIRE(!line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string rest = line.substr(7);
      const size_t sp = rest.find(' ');
      pending_help_name = rest.substr(0, sp);
      pending_help = sp == std::string::npos ? "" : unescape(rest.substr(sp + 1), false);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const size_t sp = rest.find(' ');
      REQUIRE(sp != std::string::npos);
      ParsedFamily f{rest.substr(0, sp), pending_help, rest.substr(sp + 1)};
      REQUIRE(f.name == pending_help_name);
      REQUIRE((f.type == "counter" || f.type == "gauge" || f.type == "histogram"));
      REQUIRE(p.type_of.count(f.name) == 0);
      p.type_of[f.name] = f.type;
      p.families.push_back(f);
      continue;
    }
    REQUIRE(line[0] != '#');
    Sample s = parse_sample(line);
    REQUIRE(!p.families.empty());
    const ParsedFamily& fam = p.families.back();
    if (fam.type == "histogram") {
      const bool ok = s.name == fam.name + "_bucket" || s.name == fam.name + "_sum" || s.name == fam.name + "_count";
      REQUIRE(ok);
    } else {
      REQUIRE(s.name == fam.name);
    }
    s.family = p.families.size() - 1;
    std::string key = s.name;
    for (const auto& [k, v] : s.labels) key += "|" + k + "=" + v;
    REQUIRE(series_seen.insert(key).second);
    p.samples.push_back(s);
  }
  // Histogram structure per series.
  for (const ParsedFamily& f : p.families) {
    if (f.type != "histogram") continue;
    std::map<std::string, std::vector<std::pair<double, double>>> buckets;  // series -> (le, count)
    std::map<std::string, double> counts;
    for (const Sample& s : p.samples) {
      std::string series;
      for (const auto& [k, v] : s.labels) {
        if (k != "le") series += k + "=" + v + ",";
      }
      if (s.name == f.name + "_bucket") buckets[series].emplace_back(parse_number(s.label("le")), s.value);
      if (s.name == f.name + "_count") counts[series] = s.value;
    }
    REQUIRE(buckets.size() == counts.size());
    for (const auto& [series, bs] : buckets) {
      INFO(f.name << " {" << series << "}");
      REQUIRE(bs.size() >= 2);
      for (size_t i = 1; i < bs.size(); ++i) {
        REQUIRE(bs[i].first > bs[i - 1].first);
        REQUIRE(bs[i].second >= bs[i - 1].second);
      }
      REQUIRE(std::isinf(bs.back().first));
      REQUIRE(bs.back().second == counts.at(series));
    }
  }
  return p;
}

// The cumulative count of bucket `le` of histogram `name` (no other labels).
double bucket(const Parsed& p, const std::string& name, const std::string& le) {
  return p.value(name + "_bucket", {{"le", le}});
}

std::string temp_path(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}())))
      .string();
}

// A small registry touching every rendering rule.
void fill_tiny(Registry& r) {
  auto& c = r.counter("t_requests_total", "Requests.\nSecond line with \\ backslash", {"path", "code"});
  c.labels({"/a\"b\\c\nd", "200"}).inc(3);
  c.labels({"/", "404"}).inc();
  r.gauge("t_temp", "Temperature.").get().set(-2.5);
  auto& h = r.histogram("t_lat_seconds", "Latency.", {0.5, 1});
  for (double v : {0.25, 0.5, 0.75, 2.0}) h.get().observe(v);
  r.histogram("t_size", "Size.", {1}, {"kind"}).labels({"x"}).observe(5);
}

}  // namespace

TEST_CASE("format_value spells Prometheus floats and round-trips", "[metrics]") {
  CHECK(format_value(0) == "0");
  CHECK(format_value(1) == "1");
  CHECK(format_value(3) == "3");
  CHECK(format_value(0.1) == "0.1");
  CHECK(format_value(-2.5) == "-2.5");
  CHECK(format_value(INFINITY) == "+Inf");
  CHECK(format_value(-INFINITY) == "-Inf");
  CHECK(format_value(NAN) == "NaN");
  // Round trip through strtod (what Go's and Python's parsers do) must give the same bits, for
  // random bit patterns across the whole range including subnormals.
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) continue;
    const std::string s = format_value(v);
    const double back = std::strtod(s.c_str(), nullptr);
    INFO(s);
    REQUIRE(std::memcmp(&back, &v, sizeof v) == 0);
    ++checked;
  }
  CHECK(checked > 19000);
  for (double v : {1e-300, 5e-324, 1.7976931348623157e308, 0.001, 123456789.125, 1e21}) {
    CHECK(std::strtod(format_value(v).c_str(), nullptr) == v);
  }
}

TEST_CASE("escaping of label values and HELP", "[metrics]") {
  CHECK(escape_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(escape_label_value("plain") == "plain");
  CHECK(escape_help("x \"q\" \\ \n") == "x \"q\" \\\\ \\n");  // quotes stay as they are in HELP
}

TEST_CASE("a tiny registry renders exactly", "[metrics]") {
  Registry r;
  fill_tiny(r);
  const std::string expected =
      "# HELP t_requests_total Requests.\\nSecond line with \\\\ backslash\n"
      "# TYPE t_requests_total counter\n"
      "t_requests_total{path=\"/\",code=\"404\"} 1\n"
      "t_requests_total{path=\"/a\\\"b\\\\c\\nd\",code=\"200\"} 3\n"
      "# HELP t_temp Temperature.\n"
      "# TYPE t_temp gauge\n"
      "t_temp -2.5\n"
      "# HELP t_lat_seconds Latency.\n"
      "# TYPE t_lat_seconds histogram\n"
      "t_lat_seconds_bucket{le=\"0.5\"} 2\n"
      "t_lat_seconds_bucket{le=\"1\"} 3\n"
      "t_lat_seconds_bucket{le=\"+Inf\"} 4\n"
      "t_lat_seconds_sum 3.5\n"
      "t_lat_seconds_count 4\n"
      "# HELP t_size Size.\n"
      "# TYPE t_size histogram\n"
      "t_size_bucket{kind=\"x\",le=\"1\"} 0\n"
      "t_size_bucket{kind=\"x\",le=\"+Inf\"} 1\n"
      "t_size_sum{kind=\"x\"} 5\n"
      "t_size_count{kind=\"x\"} 1\n";
  const std::string text = r.render();
  CHECK(text == expected);

  // The same through the parser: escapes undone, histogram rules hold.
  const Parsed p = parse_exposition(text);
  REQUIRE(p.families.size() == 4);
  CHECK(p.families[0].help == "Requests.\nSecond line with \\ backslash");
  CHECK(p.value("t_requests_total", {{"path", "/a\"b\\c\nd"}, {"code", "200"}}) == 3);
  CHECK(p.value("t_temp") == -2.5);
  CHECK(bucket(p, "t_lat_seconds", "0.5") == 2);  // 0.5 itself falls in le="0.5": bounds are inclusive
  CHECK(p.value("t_lat_seconds_sum") == 3.5);
}

TEST_CASE("registry refuses bad names and label counts", "[metrics]") {
  Registry r;
  r.counter("ok_total", "x", {"a"});
  r.histogram("h", "x", {1});
  CHECK_THROWS_AS(r.counter("ok_total", "dup"), sampan::Error);
  CHECK_THROWS_AS(r.gauge("h_count", "collides with histogram h"), sampan::Error);
  CHECK_THROWS_AS(r.histogram("ok_total", "x", {1}), sampan::Error);
  CHECK_THROWS_AS(r.counter("h_bucket", "x"), sampan::Error);
  CHECK_THROWS_AS(r.gauge("1bad", "x"), sampan::Error);
  CHECK_THROWS_AS(r.gauge("bad-name", "x"), sampan::Error);
  CHECK_THROWS_AS(r.gauge("g", "x", {"__reserved"}), sampan::Error);
  CHECK_THROWS_AS(r.gauge("g2", "x", {"a", "a"}), sampan::Error);
  CHECK_THROWS_AS(r.histogram("h2", "x", {1}, {"le"}), sampan::Error);
  CHECK_THROWS_AS(r.histogram("h3", "x", {2, 1}), sampan::Error);
  CHECK_THROWS_AS(r.histogram("h4", "x", {1, INFINITY}), sampan::Error);
  CHECK_THROWS_AS(r.histogram("h5", "x", {}), sampan::Error);
  auto& fam = r.counter("c_total", "x", {"a", "b"});
  CHECK_THROWS_AS(fam.labels({"only-one"}), sampan::Error);
  // Counters never go down; NaN observations are dropped.
  auto& c = r.counter("d_total", "x").get();
  c.inc(2);
  c.inc(-1);
  c.inc(NAN);
  CHECK(c.value() == 2);
  auto& h = r.histogram("e", "x", {1}).get();
  h.observe(NAN);
  CHECK(h.snapshot().count == 0);
}

TEST_CASE("concurrent updates give exact totals while scrapes stay well-formed", "[metrics]") {
  Registry r;
  auto& counters = r.counter("c_total", "x", {"parity"});
  auto& gauge = r.gauge("g", "x").get();
  auto& hist = r.histogram("h", "x", {0.5, 1}).get();
  constexpr int kThreads = 8;
  constexpr int kIters = 20000;
  std::atomic<bool> done{false};
  std::atomic<bool> scraping{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    // Each scrape must parse and keep _count == the +Inf bucket even mid-update. At least one
    // scrape runs, and the workers start only once the scraper is running (on a loaded machine
    // they could otherwise all finish before it is first scheduled).
    scraping.store(true);
    do {
      parse_exposition(r.render());
      scrapes.fetch_add(1);
    } while (!done.load());
  });
  while (!scraping.load()) std::this_thread::yield();
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      Counter& mine = counters.labels({t % 2 == 0 ? "even" : "odd"});
      for (int i = 0; i < kIters; ++i) {
        mine.inc();
        gauge.inc(2);
        gauge.dec();
        hist.observe(0.5 * (i % 3));  // 0, 0.5, 1: every value exact in binary
      }
    });
  }
  for (auto& w : workers) w.join();
  done.store(true);
  scraper.join();
  const Parsed p = parse_exposition(r.render());
  CHECK(p.value("c_total", {{"parity", "even"}}) == kThreads / 2 * kIters);
  CHECK(p.value("c_total", {{"parity", "odd"}}) == kThreads / 2 * kIters);
  CHECK(p.value("g") == kThreads * kIters);
  // i % 3 over 0..kIters-1: counts of 0, 1, 2 residues.
  const double n0 = (kIters + 2) / 3, n1 = (kIters + 1) / 3, n2 = kIters / 3;
  CHECK(bucket(p, "h", "0.5") == kThreads * (n0 + n1));
  CHECK(bucket(p, "h", "1") == kThreads * kIters);
  CHECK(p.value("h_count") == kThreads * kIters);
  CHECK(p.value("h_sum") == kThreads * (0.5 * n1 + 1.0 * n2));
  CHECK(scrapes.load() >= 1);
}

namespace {

sampan::runtime::EngineEvent final_event(sampan::runtime::EngineFinish finish, int64_t prompt, int64_t completion,
                                         double queue_s, double first_s, double total_s) {
  sampan::runtime::EngineEvent e;
  e.finished = true;
  e.finish = finish;
  e.usage.prompt_tokens = prompt;
  e.usage.completion_tokens = completion;
  e.timings.queue_s = queue_s;
  e.timings.first_token_s = first_s;
  e.timings.total_s = total_s;
  return e;
}

// ServeMetrics after a fixed set of calls; shared by the family checks and the Python check.
void drive(ServeMetrics& m) {
  using sampan::runtime::EngineFinish;
  m.request_done("openai", 200);
  m.request_done("openai", 200);
  m.request_done("grpc", 8);
  m.generation_done(final_event(EngineFinish::kStop, 7, 5, 0.003, 0.02, 0.5));
  // Cancelled while waiting: no token, never scheduled -> no TTFT, no queue time.
  m.generation_done(final_event(EngineFinish::kCancelled, 3, 0, 0, 0, 0.125));
  m.inter_token(0.05);
  m.step({3, 2, 40, 0.01});
  m.set_ready(true);
}

}  // namespace

TEST_CASE("ServeMetrics: LoRA adapters' request counts come from the engine by name", "[metrics]") {
  ServeMetrics m;
  m.set_lora_names({"alpha", "beta"});
  {
    const Parsed p = parse_exposition(m.render());
    CHECK(p.value("sampan:lora_requests_total", {{"adapter", "alpha"}}) == 0);
    CHECK(p.value("sampan:lora_requests_total", {{"adapter", "beta"}}) == 0);
  }
  sampan::runtime::EngineStats st;
  st.lora_requests = {3, 7};
  m.set_engine_stats_source([&st] { return st; });
  {
    const Parsed p = parse_exposition(m.render());
    CHECK(p.value("sampan:lora_requests_total", {{"adapter", "alpha"}}) == 3);
    CHECK(p.value("sampan:lora_requests_total", {{"adapter", "beta"}}) == 7);
  }
  st.lora_requests = {4, 7};
  CHECK(parse_exposition(m.render()).value("sampan:lora_requests_total", {{"adapter", "alpha"}}) == 4);
}

TEST_CASE("ServeMetrics: generation_done and friends update the right families", "[metrics]") {
  ServeMetrics m;
  {
    // Before anything: every family of serve_metrics.h present with its type, all zero.
    const Parsed p = parse_exposition(m.render());
    const std::map<std::string, std::string> expected_types = {
        {"sampan:requests_total", "counter"},
        {"sampan:request_finished_total", "counter"},
        {"sampan:prompt_tokens_total", "counter"},
        {"sampan:generation_tokens_total", "counter"},
        {"sampan:time_to_first_token_seconds", "histogram"},
        {"sampan:inter_token_latency_seconds", "histogram"},
        {"sampan:e2e_request_latency_seconds", "histogram"},
        {"sampan:request_queue_time_seconds", "histogram"},
        {"sampan:num_requests_running", "gauge"},
        {"sampan:num_requests_waiting", "gauge"},
        {"sampan:kv_cache_usage_ratio", "gauge"},
        {"sampan:kv_cache_blocks_used", "gauge"},
        {"sampan:kv_cache_blocks_total", "gauge"},
        {"sampan:kv_cache_bytes", "gauge"},
        {"sampan:prefix_cache_queries_total", "counter"},
        {"sampan:prefix_cache_hits_total", "counter"},
        {"sampan:num_preemptions_total", "counter"},
        {"sampan:cuda_graph_replays_total", "counter"},
        {"sampan:batch_size", "histogram"},
        {"sampan:batch_tokens", "histogram"},
        {"sampan:server_ready", "gauge"},
        {"sampan:lora_requests_total", "counter"},
        {"sampan:tensor_runs_total", "counter"},
        {"sampan:tensor_requests_total", "counter"},
        {"sampan:tensor_rows_total", "counter"},
    };
    CHECK(p.type_of == expected_types);
    for (const char* f : {"stop", "length", "cancelled", "timeout", "error"}) {
      CHECK(p.value("sampan:request_finished_total", {{"finish_reason", f}}) == 0);
    }
    CHECK(p.value("sampan:server_ready") == 0);
    CHECK(p.value("sampan:time_to_first_token_seconds_count") == 0);
    // The documented bucket ranges: 1 ms .. 60 s, ITL 1 ms .. 10 s, batch size 1 .. 512.
    CHECK(bucket(p, "sampan:time_to_first_token_seconds", "0.001") == 0);
    CHECK(bucket(p, "sampan:e2e_request_latency_seconds", "60") == 0);
    CHECK(bucket(p, "sampan:request_queue_time_seconds", "60") == 0);
    CHECK(bucket(p, "sampan:inter_token_latency_seconds", "10") == 0);
    CHECK(bucket(p, "sampan:batch_size", "1") == 0);
    CHECK(bucket(p, "sampan:batch_size", "512") == 0);
  }

  drive(m);
  const Parsed p = parse_exposition(m.render());
  CHECK(p.value("sampan:requests_total", {{"api", "openai"}, {"code", "200"}}) == 2);
  CHECK(p.value("sampan:requests_total", {{"api", "grpc"}, {"code", "8"}}) == 1);
  CHECK(p.value("sampan:request_finished_total", {{"finish_reason", "stop"}}) == 1);
  CHECK(p.value("sampan:request_finished_total", {{"finish_reason", "cancelled"}}) == 1);
  CHECK(p.value("sampan:request_finished_total", {{"finish_reason", "length"}}) == 0);
  CHECK(p.value("sampan:prompt_tokens_total") == 10);
  CHECK(p.value("sampan:generation_tokens_total") == 5);
  // TTFT only for the request that produced a token: 0.02 s lands in (0.01, 0.025].
  CHECK(p.value("sampan:time_to_first_token_seconds_count") == 1);
  CHECK(p.value("sampan:time_to_first_token_seconds_sum") == 0.02);
  CHECK(bucket(p, "sampan:time_to_first_token_seconds", "0.01") == 0);
  CHECK(bucket(p, "sampan:time_to_first_token_seconds", "0.025") == 1);
  CHECK(p.value("sampan:request_queue_time_seconds_count") == 1);
  CHECK(p.value("sampan:request_queue_time_seconds_sum") == 0.003);
  CHECK(p.value("sampan:e2e_request_latency_seconds_count") == 2);
  CHECK(p.value("sampan:e2e_request_latency_seconds_sum") == 0.625);
  CHECK(bucket(p, "sampan:e2e_request_latency_seconds", "0.1") == 0);
  CHECK(bucket(p, "sampan:e2e_request_latency_seconds", "0.25") == 1);
  CHECK(bucket(p, "sampan:e2e_request_latency_seconds", "0.5") == 2);
  CHECK(p.value("sampan:inter_token_latency_seconds_count") == 1);
  CHECK(bucket(p, "sampan:batch_size", "2") == 0);
  CHECK(bucket(p, "sampan:batch_size", "4") == 1);
  CHECK(bucket(p, "sampan:batch_tokens", "32") == 0);
  CHECK(bucket(p, "sampan:batch_tokens", "64") == 1);
  CHECK(p.value("sampan:server_ready") == 1);
  CHECK(p.value("sampan:num_requests_running") == 0);  // no engine source yet

  // Engine gauges and cumulative counters come from the source at scrape time.
  sampan::runtime::EngineStats st;
  st.running = 3;
  st.waiting = 4;
  st.kv_blocks_total = 100;
  st.kv_blocks_used = 25;
  st.kv_cache_bytes = 3 << 20;
  st.kv_usage = 0.25;
  st.prefix_query_tokens = 1000;
  st.prefix_hit_tokens = 600;
  st.preemptions = 2;
  st.cuda_graph_replays = 40;
  m.set_engine_stats_source([&st] { return st; });
  const Parsed q = parse_exposition(m.render());
  CHECK(q.value("sampan:num_requests_running") == 3);
  CHECK(q.value("sampan:num_requests_waiting") == 4);
  CHECK(q.value("sampan:kv_cache_usage_ratio") == 0.25);
  CHECK(q.value("sampan:kv_cache_blocks_used") == 25);
  CHECK(q.value("sampan:kv_cache_blocks_total") == 100);
  CHECK(q.value("sampan:kv_cache_bytes") == 3 << 20);
  CHECK(q.value("sampan:prefix_cache_queries_total") == 1000);
  CHECK(q.value("sampan:prefix_cache_hits_total") == 600);
  CHECK(q.value("sampan:num_preemptions_total") == 2);
  CHECK(q.value("sampan:cuda_graph_replays_total") == 40);
  st.kv_blocks_used = 0;  // a cancelled stream freed its blocks: the next scrape shows it
  CHECK(parse_exposition(m.render()).value("sampan:kv_cache_blocks_used") == 0);
  // A source that throws (engine going away) leaves the last values and the scrape succeeds.
  m.set_engine_stats_source([]() -> sampan::runtime::EngineStats { throw std::runtime_error("gone"); });
  CHECK(parse_exposition(m.render()).value("sampan:num_requests_running") == 3);
}

TEST_CASE("prometheus_client's parser reads the exposition identically", "[metrics]") {
  // The reference parser is required (scripts/setup.sh installs it): missing is a failure.
  REQUIRE(std::system("python3 -c 'import prometheus_client' >/dev/null 2>&1") == 0);
  Registry tiny;
  fill_tiny(tiny);
  ServeMetrics m;
  drive(m);
  sampan::runtime::EngineStats st;
  st.running = 1;
  st.kv_blocks_total = 64;
  st.kv_usage = 1.0 / 3.0;
  m.set_engine_stats_source([&st] { return st; });
  const std::string text = tiny.render() + m.render();

  const std::string in_path = temp_path("sampan_metrics") + ".txt";
  const std::string out_path = in_path + ".out";
  const std::string py_path = in_path + ".py";
  std::ofstream(in_path, std::ios::binary) << text;
  // Families and samples as tab-separated lines; values in float.hex so nothing is lost.
  std::ofstream(py_path) << R"PY(
import sys
from prometheus_client.parser import text_string_to_metric_families as parse
def esc(s):
    return s.replace('\\', '\\\\').replace('\n', '\\n').replace('\t', '\\t')
with open(sys.argv[1], encoding='utf-8') as f:
    text = f.read()
with open(sys.argv[2], 'w', encoding='utf-8') as out:
    for fam in parse(text):
        out.write('F\t%s\t%s\t%s\n' % (fam.name, fam.type, esc(fam.documentation)))
        for s in fam.samples:
            labels = ','.join('%s=%s' % (k, esc(v)) for k, v in s.labels.items())
            out.write('S\t%s\t%s\t%s\n' % (s.name, labels, float(s.value).hex()))
)PY";
  const int rc = std::system(("python3 '" + py_path + "' '" + in_path + "' '" + out_path + "'").c_str());
  REQUIRE(rc == 0);

  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '\\') o += "\\\\";
      else if (c == '\n') o += "\\n";
      else if (c == '\t') o += "\\t";
      else o += c;
    }
    return o;
  };
  // What our own parser read, in the shape prometheus_client reports it (counter families drop
  // "_total"; values compared as doubles).
  const Parsed ours = parse_exposition(text);
  std::vector<std::string> want_lines;
  std::vector<double> want_values;
  for (size_t fi = 0; fi < ours.families.size(); ++fi) {
    const ParsedFamily& f = ours.families[fi];
    std::string fname = f.name;
    if (f.type == "counter" && fname.size() > 6 && fname.compare(fname.size() - 6, 6, "_total") == 0) {
      fname.resize(fname.size() - 6);
    }
    want_lines.push_back("F\t" + fname + "\t" + f.type + "\t" + esc(f.help));
    want_values.push_back(0);
    for (const Sample& s : ours.samples) {
      if (s.family != fi) continue;
      std::string l;
      for (const auto& [k, v] : s.labels) l += (l.empty() ? "" : ",") + k + "=" + esc(v);
      want_lines.push_back("S\t" + s.name + "\t" + l);
      want_values.push_back(s.value);
    }
  }
  std::ifstream got_in(out_path);
  std::vector<std::string> got_lines;
  std::vector<double> got_values;
  for (std::string line; std::getline(got_in, line);) {
    if (line.rfind("S\t", 0) == 0) {
      const size_t tab = line.rfind('\t');
      got_values.push_back(std::strtod(line.c_str() + tab + 1, nullptr));  // hex float
      line.resize(tab);
    } else {
      got_values.push_back(0);
    }
    got_lines.push_back(line);
  }
  REQUIRE(got_lines.size() == want_lines.size());
  for (size_t i = 0; i < want_lines.size(); ++i) {
    INFO(want_lines[i]);
    CHECK(got_lines[i] == want_lines[i]);
    CHECK(got_values[i] == want_values[i]);
  }
  CHECK(want_lines.size() > 100);  // the whole ServeMetrics exposition went through
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  std::remove(py_path.c_str());
}
