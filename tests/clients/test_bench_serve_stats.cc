// `sampan bench-serve` figures against values computed plainly here: percentiles, means,
// throughput and goodput of hand-made request records; the gamma / Poisson arrival generator's
// moments; the SSE reader; the workload; and that the JSON and SVG/HTML output is well-formed.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "clients/bench_serve/bench_serve_report.h"
#include "clients/bench_serve/bench_serve_sse.h"
#include "clients/bench_serve/bench_serve_stats.h"
#include "clients/bench_serve/bench_serve_workload.h"

using namespace sampan::bench;

namespace {

// Rank-interpolated percentile written out independently (numpy's "linear" method).
double naive_percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1.0) * q / 100.0;
  const double lo = std::floor(h);
  const double hi = std::ceil(h);
  const double a = v[static_cast<size_t>(lo)];
  const double b = v[static_cast<size_t>(hi)];
  return a + (h - lo) * (b - a);
}

RequestRecord make_record(int64_t index, double start, double ttft, double step, int n_chunks,
                          int64_t in_tokens, bool ok = true) {
  RequestRecord r;
  r.index = index;
  r.start_s = start;
  r.ok = ok;
  for (int i = 0; i < n_chunks; ++i) {
    r.chunk_s.push_back(ttft + step * i);
    r.chunk_tokens.push_back(1);
  }
  r.e2e_s = n_chunks > 0 ? r.chunk_s.back() + 0.001 : 0.05;
  r.input_tokens = ok ? in_tokens : -1;
  r.output_tokens = ok ? n_chunks : -1;
  if (!ok) r.error_kind = "http_500";
  return r;
}

// Checks that every tag opened in `xml` is closed in order (no attribute values contain '<' or
// '>' because xml_escape replaced them) and that only the five XML entities are used.
bool well_formed_xml(const std::string& xml, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = xml.find_first_of("<&", i)) != std::string::npos) {
    if (xml[i] == '&') {
      const size_t semi = xml.find(';', i);
      static const std::set<std::string> kEntities = {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"};
      if (semi == std::string::npos || kEntities.count(xml.substr(i, semi - i + 1)) == 0) {
        *why = "bad entity at " + std::to_string(i);
        return false;
      }
      i = semi + 1;
      continue;
    }
    const size_t close = xml.find('>', i);
    if (close == std::string::npos) {
      *why = "unterminated tag";
      return false;
    }
    std::string tag = xml.substr(i + 1, close - i - 1);
    i = close + 1;
    if (tag.rfind("!DOCTYPE", 0) == 0) continue;
    if (!tag.empty() && tag.back() == '/') continue;  // self-closing
    if (!tag.empty() && tag.front() == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) {
        *why = "</" + name + "> closes <" + (stack.empty() ? "" : stack.back()) + ">";
        return false;
      }
      stack.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n"));
    stack.push_back(name);
  }
  if (!stack.empty()) *why = "unclosed <" + stack.back() + ">";
  return stack.empty();
}

}  // namespace

TEST_CASE("percentiles and means match a plain computation", "[bench_serve]") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(-3.0, 1.0);
  for (size_t n : {1, 2, 7, 17, 33, 769}) {
    std::vector<double> v(n);
    for (double& x : v) x = dist(rng);
    const Distribution d = summarize(v);
    double sum = 0;
    for (double x : v) sum += x;
    REQUIRE(d.count == static_cast<int64_t>(n));
    // Same arithmetic in a different order: only rounding differs.
    CHECK(d.mean == Approx(sum / static_cast<double>(n)).epsilon(1e-12));
    CHECK(d.p50 == Approx(naive_percentile(v, 50)).epsilon(1e-12));
    CHECK(d.p90 == Approx(naive_percentile(v, 90)).epsilon(1e-12));
    CHECK(d.p99 == Approx(naive_percentile(v, 99)).epsilon(1e-12));
    CHECK(d.min == *std::min_element(v.begin(), v.end()));
    CHECK(d.max == *std::max_element(v.begin(), v.end()));
  }
  // A hand-checked case: positions 0.5 / 0.9*3 = 2.7 / 2.97 of {1, 2, 3, 4}.
  const Distribution d = summarize({4, 1, 3, 2});
  CHECK(d.p50 == Approx(2.5));
  CHECK(d.p90 == Approx(3.7));
  CHECK(d.p99 == Approx(3.97));
  CHECK(summarize({}).count == 0);
}

TEST_CASE("run summary: throughput, tokens, TPOT, ITL and goodput", "[bench_serve]") {
  std::vector<RequestRecord> recs;
  recs.push_back(make_record(0, 0.0, 0.10, 0.02, 11, 30));   // TPOT 0.02(ish) + 0.001/10
  recs.push_back(make_record(1, 0.5, 0.30, 0.05, 5, 17));
  recs.push_back(make_record(2, 1.0, 0.05, 0.01, 1, 7));     // one token: no TPOT, no ITL
  recs.push_back(make_record(3, 1.2, 0.0, 0.0, 0, 0, false));  // failed
  const Slo none;
  const RunSummary s = summarize_run(recs, none);
  CHECK(s.completed == 3);
  CHECK(s.failed == 1);
  CHECK(s.errors.at("http_500") == 1);
  CHECK(s.total_input_tokens == 30 + 17 + 7);
  CHECK(s.total_output_tokens == 11 + 5 + 1);
  // The run ends with the latest response: max(start + e2e).
  double end = 0;
  for (const auto& r : recs) end = std::max(end, r.start_s + r.e2e_s);
  CHECK(s.duration_s == Approx(end));
  CHECK(s.request_throughput == Approx(3 / end));
  CHECK(s.output_throughput == Approx(17 / end));
  CHECK(s.input_throughput == Approx(54 / end));
  CHECK(s.goodput == Approx(3 / end));

  // TPOT per request = (e2e - ttft) / (tokens - 1), computed by hand.
  const double tpot0 = (recs[0].e2e_s - 0.10) / 10.0;
  const double tpot1 = (recs[1].e2e_s - 0.30) / 4.0;
  CHECK(s.tpot.count == 2);
  CHECK(s.tpot.mean == Approx((tpot0 + tpot1) / 2));
  // ITL: every gap between chunks: 10 gaps of 0.02 and 4 of 0.05.
  CHECK(s.itl.count == 14);
  CHECK(s.itl.mean == Approx((10 * 0.02 + 4 * 0.05) / 14));
  CHECK(s.ttft.count == 3);
  CHECK(s.ttft.p50 == Approx(0.10));
  CHECK(s.e2e.count == 3);

  // Goodput with SLOs: only request 2 (TTFT 50 ms) meets a 60 ms TTFT target.
  Slo slo;
  REQUIRE(parse_slo("ttft:60", &slo).empty());
  const RunSummary g = summarize_run(recs, slo);
  CHECK(g.good_requests == 1);
  CHECK(g.goodput == Approx(1 / end));
  Slo tpot_slo;
  REQUIRE(parse_slo("tpot:30", &tpot_slo).empty());
  CHECK(summarize_run(recs, tpot_slo).good_requests == 2);  // request 1's 50 ms TPOT misses

  // A usage report that disagrees with the streamed chunks is counted, and usage wins.
  recs[0].output_tokens = 12;
  const RunSummary m = summarize_run(recs, none);
  CHECK(m.count_mismatches == 1);
  CHECK(m.total_output_tokens == 12 + 5 + 1);

  Slo bad;
  CHECK_FALSE(parse_slo("ttft", &bad).empty());
  CHECK_FALSE(parse_slo("foo:10", &bad).empty());
  CHECK_FALSE(parse_slo("e2e:-1", &bad).empty());
  CHECK_FALSE(parse_slo("e2e:1x", &bad).empty());
}

TEST_CASE("disconnected on purpose: counted apart, out of every figure", "[bench_serve]") {
  std::vector<RequestRecord> recs;
  recs.push_back(make_record(0, 0.0, 0.10, 0.02, 11, 30));
  recs.push_back(make_record(1, 0.5, 0.30, 0.05, 5, 17));
  recs.push_back(make_record(2, 1.2, 0.0, 0.0, 0, 0, false));  // a real failure: http_500
  // Abandoned after 3 chunks, late and slow: would change every figure if it were counted.
  RequestRecord d1 = make_record(3, 9.0, 5.0, 1.0, 3, 0, false);
  d1.disconnected = true;
  d1.error_kind.clear();
  d1.e2e_s = 20;
  recs.push_back(d1);
  // Abandoned before reading anything.
  RequestRecord d2 = make_record(4, 0.2, 0.0, 0.0, 0, 0, false);
  d2.disconnected = true;
  d2.error_kind.clear();
  recs.push_back(d2);

  const RunSummary s = summarize_run(recs, Slo{});
  CHECK(s.completed == 2);
  CHECK(s.failed == 1);
  CHECK(s.disconnected == 2);
  CHECK(s.errors.size() == 1);
  CHECK(s.errors.at("http_500") == 1);
  CHECK(s.errors.count("unknown") == 0);
  // The same figures as without the disconnected records.
  const std::vector<RequestRecord> kept(recs.begin(), recs.begin() + 3);
  const RunSummary k = summarize_run(kept, Slo{});
  CHECK(s.duration_s == Approx(k.duration_s));
  CHECK(s.duration_s == Approx(std::max({0.0 + recs[0].e2e_s, 0.5 + recs[1].e2e_s, 1.2 + 0.05})));
  CHECK(s.total_input_tokens == 30 + 17);
  CHECK(s.total_output_tokens == 11 + 5);
  CHECK(s.request_throughput == Approx(k.request_throughput));
  CHECK(s.output_throughput == Approx(k.output_throughput));
  CHECK(s.goodput == Approx(k.goodput));
  CHECK(s.ttft.count == 2);
  CHECK(s.ttft.max == Approx(0.30));
  CHECK(s.e2e.count == 2);
  CHECK(s.itl.count == 10 + 4);
  CHECK(s.usage_missing == 0);
  CHECK(output_tokens_per_bin(recs, 1.0) == output_tokens_per_bin(kept, 1.0));
  CHECK(finished_per_bin(recs, 1.0) == finished_per_bin(kept, 1.0));
  CHECK(k.disconnected == 0);

  // Every request abandoned: nothing completed, nothing failed, no figures.
  const RunSummary all = summarize_run({d1, d2}, Slo{});
  CHECK(all.completed == 0);
  CHECK(all.failed == 0);
  CHECK(all.disconnected == 2);
  CHECK(all.duration_s == 0);
  CHECK(all.request_throughput == 0);

  // The reports show the count; the request is marked, with no error kind.
  RunInfo info;
  info.backend = "openai-completions";
  const auto j = nlohmann::json::parse(report_json(info, s, recs).dump());
  CHECK(j["summary"]["disconnected"] == 2);
  CHECK(j["summary"]["failed"] == 1);
  CHECK(j["requests"][3]["disconnected"] == true);
  CHECK_FALSE(j["requests"][3].contains("error_kind"));
  CHECK_FALSE(j["requests"][0].contains("disconnected"));
  CHECK(format_table(info, s).find("disconnected on purpose:") != std::string::npos);
  CHECK(report_html(info, s, recs).find("Disconnected on purpose") != std::string::npos);
  // Without --disconnect-fraction and nothing disconnected, the table does not mention it.
  CHECK(format_table(info, k).find("disconnected") == std::string::npos);
  info.disconnect_fraction = 0.1;
  CHECK(format_table(info, k).find("disconnected on purpose:") != std::string::npos);
}

TEST_CASE("disconnect plan: reproducible, the asked fraction, 1..8 chunks", "[bench_serve]") {
  for (int64_t i = 0; i < 1000; ++i) {
    CHECK_FALSE(plan_disconnect(0.0, 7, i).abandon);
    CHECK(plan_disconnect(1.0, 7, i).abandon);
  }
  const int n = 20000;
  for (double f : {0.1, 0.5}) {
    int abandoned = 0, before_reading = 0;
    std::vector<int> by_chunks(9, 0);
    for (int64_t i = 0; i < n; ++i) {
      const DisconnectPlan p = plan_disconnect(f, 42, i);
      const DisconnectPlan again = plan_disconnect(f, 42, i);
      REQUIRE(p.abandon == again.abandon);
      REQUIRE(p.after_chunks == again.after_chunks);
      if (!p.abandon) {
        CHECK(p.after_chunks == 0);
        continue;
      }
      ++abandoned;
      REQUIRE(p.after_chunks >= 0);
      REQUIRE(p.after_chunks <= 8);
      ++by_chunks[static_cast<size_t>(p.after_chunks)];
      if (p.after_chunks == 0) ++before_reading;
    }
    // Binomial: 5 standard deviations.
    const double sd = std::sqrt(n * f * (1 - f));
    CHECK(std::fabs(abandoned - n * f) < 5 * sd);
    // A quarter before reading, the rest spread over 1..8 chunks.
    CHECK(std::fabs(before_reading - abandoned / 4.0) < 5 * std::sqrt(abandoned * 0.25 * 0.75));
    for (int c = 1; c <= 8; ++c) CHECK(by_chunks[static_cast<size_t>(c)] > 0);
  }
  // A smaller fraction abandons a subset of a larger one's requests (same seed), and another
  // seed picks other requests.
  int differ = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    if (plan_disconnect(0.1, 42, i).abandon) CHECK(plan_disconnect(0.5, 42, i).abandon);
    if (plan_disconnect(0.5, 42, i).abandon != plan_disconnect(0.5, 43, i).abandon) ++differ;
  }
  CHECK(differ > 500);
}

TEST_CASE("throughput over time bins tokens by arrival", "[bench_serve]") {
  std::vector<RequestRecord> recs;
  recs.push_back(make_record(0, 0.0, 0.5, 0.3, 4, 5));  // chunks at 0.5 0.8 1.1 1.4
  recs.push_back(make_record(1, 2.0, 0.6, 0.1, 2, 5));  // at 2.6 2.7
  const auto bins = output_tokens_per_bin(recs, 1.0);
  REQUIRE(bins.size() == 3);
  CHECK(bins[0] == 2);
  CHECK(bins[1] == 2);
  CHECK(bins[2] == 2);
  const auto fin = finished_per_bin(recs, 1.0);
  REQUIRE(fin.size() == 3);
  CHECK(fin[1] == 1);  // ends at 1.401
  CHECK(fin[2] == 1);  // ends at 2.701
}

TEST_CASE("arrival generator: gamma moments and Poisson counts", "[bench_serve]") {
  const int n = 200000;
  for (double rate : {0.5, 4.0, 50.0}) {
    for (double b : {0.25, 1.0, 4.0}) {
      ArrivalGenerator gen(rate, b, 1234);
      double sum = 0, sum2 = 0, min_gap = 1e300;
      for (int i = 0; i < n; ++i) {
        const double g = gen.next_gap_s();
        min_gap = std::min(min_gap, g);
        sum += g;
        sum2 += g * g;
      }
      const double mean = sum / n;
      const double var = sum2 / n - mean * mean;
      CHECK(min_gap >= 0);
      // Gamma(shape b, scale 1/(rate b)): mean 1/rate, variance 1/(rate^2 b). With 2e5 samples
      // the sample mean's relative standard error is 1/sqrt(b n) <= 0.5%: 3% is > 6 sigma.
      // The variance estimate is noisier (heavier tails at small b): 10%.
      CHECK(mean * rate == Approx(1.0).epsilon(0.03));
      CHECK(var * rate * rate * b == Approx(1.0).epsilon(0.10));
    }
  }
  // Burstiness 1 is a Poisson process: arrivals per unit window have mean = variance = rate.
  const double rate = 5.0;
  ArrivalGenerator gen(rate, 1.0, 99);
  const int windows = 20000;
  std::vector<int> counts(windows, 0);
  double t = gen.next_gap_s();
  while (t < windows) {
    ++counts[static_cast<size_t>(t)];
    t += gen.next_gap_s();
  }
  double m = 0, v = 0;
  for (int c : counts) m += c;
  m /= windows;
  for (int c : counts) v += (c - m) * (c - m);
  v /= windows - 1;
  // Standard errors: sqrt(5 / 2e4) = 0.016 for the mean, ~0.05 for the variance.
  CHECK(m == Approx(rate).epsilon(0.02));
  CHECK(v == Approx(rate).epsilon(0.06));

  ArrivalGenerator inf(std::numeric_limits<double>::infinity(), 1.0, 1);
  CHECK(inf.next_gap_s() == 0.0);
  // Same seed, same sequence.
  ArrivalGenerator a(3.0, 2.0, 42), b(3.0, 2.0, 42);
  for (int i = 0; i < 10; ++i) CHECK(a.next_gap_s() == b.next_gap_s());
}

TEST_CASE("SSE reader: chunks, usage, errors, split lines", "[bench_serve]") {
  const std::string stream =
      "data: {\"choices\":[{\"index\":0,\"text\":\"Hello\",\"finish_reason\":null}]}\n\n"
      ": keep-alive\n\n"
      "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"text\":\" world\",\"finish_reason\":\"length\"}]}\r\n\r\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\n"
      "data: [DONE]\n\n";
  // Fed one byte at a time and all at once: the same result.
  for (size_t step : {size_t{1}, size_t{7}, stream.size()}) {
    RequestRecord r;
    SseReader sse(false);
    for (size_t i = 0; i < stream.size(); i += step) {
      sse.feed(std::string_view(stream).substr(i, step), static_cast<double>(i), &r);
    }
    sse.flush(1e9, &r);
    CHECK_FALSE(sse.failed());
    CHECK(sse.done());
    CHECK(r.chunk_s.size() == 2);  // the empty-text chunk carries no token
    CHECK(r.counted_tokens() == 2);
    CHECK(r.input_tokens == 9);
    CHECK(r.output_tokens == 3);
  }
  {
    RequestRecord r;
    SseReader chat(true);
    chat.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
              "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
              0.5, &r);
    CHECK(r.chunk_s == std::vector<double>{0.5});
  }
  {
    RequestRecord r;
    SseReader sse(false);
    sse.feed("data: {\"error\":{\"message\":\"too slow\",\"code\":504}}\n\n", 0, &r);
    CHECK(sse.failed());
    CHECK(sse.error_kind() == "http_504");
    CHECK(sse.error_message() == "too slow");
  }
  {
    RequestRecord r;
    SseReader sse(false);
    sse.feed("data: {not json\n\n", 0, &r);
    CHECK(sse.error_kind() == "protocol");
  }
  {
    // An unterminated last event still counts at flush.
    RequestRecord r;
    SseReader sse(false);
    sse.feed("data: {\"choices\":[{\"text\":\"x\"}]}", 0, &r);
    CHECK(r.chunk_s.empty());
    sse.flush(2, &r);
    CHECK(r.chunk_s == std::vector<double>{2});
  }
}

TEST_CASE("workload: synthetic lengths and JSONL datasets", "[bench_serve]") {
  Workload w = Workload::synthetic({.input_len = 33, .output_len = 17, .input_range = 0.5,
                                    .output_range = 0.25, .seed = 5});
  std::set<std::string> words(synthetic_words().begin(), synthetic_words().end());
  for (int i = 0; i < 200; ++i) {
    const Prompt p = w.next();
    // Uniform in [floor(33 * 0.5), ceil(33 * 1.5)] and [floor(17 * .75), ceil(17 * 1.25)].
    CHECK(p.expected_input_tokens >= 16);
    CHECK(p.expected_input_tokens <= 50);
    CHECK(p.max_tokens >= 12);
    CHECK(p.max_tokens <= 22);
    size_t n = 0;
    size_t from = 0;
    while (from <= p.text.size()) {
      const size_t sp = std::min(p.text.find(' ', from), p.text.size());
      CHECK(words.count(p.text.substr(from, sp - from)) == 1);
      ++n;
      from = sp + 1;
    }
    CHECK(static_cast<int64_t>(n) == p.expected_input_tokens);
  }
  // Same seed, same prompts.
  Workload a = Workload::synthetic({.seed = 9}), b = Workload::synthetic({.seed = 9});
  CHECK(a.next().text == b.next().text);

  const std::string path = std::string(SAMPAN_BINARY_DIR) + "/test_bench_serve_dataset.jsonl";
  {
    std::ofstream out(path);
    out << "{\"prompt\": \"hello there\", \"max_tokens\": 5}\n\n"
        << "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
  }
  Workload d = Workload::from_jsonl(path, 77);
  CHECK(d.dataset_size() == 2);
  CHECK(d.has_chat_prompts());
  const Prompt p0 = d.next();
  CHECK(p0.text == "hello there");
  CHECK(p0.max_tokens == 5);
  const Prompt p1 = d.next();
  CHECK(p1.messages.size() == 1);
  CHECK(p1.max_tokens == 77);
  CHECK(d.next().text == "hello there");  // starts over
  {
    std::ofstream out(path);
    out << "{\"prompt\": \"ok\"}\n{\"prompt\": 3}\n";
  }
  CHECK_THROWS_WITH(Workload::from_jsonl(path, 1), Catch::Contains("line 2"));
  std::remove(path.c_str());
}

TEST_CASE("JSON, SVG and HTML reports are well-formed", "[bench_serve]") {
  std::vector<RequestRecord> recs;
  for (int i = 0; i < 17; ++i) recs.push_back(make_record(i, 0.1 * i, 0.05 + 0.01 * i, 0.02, 5, 9));
  recs.push_back(make_record(17, 1.0, 0, 0, 0, 0, false));
  recs.back().error = "bad <thing> & \"quote\"";
  const RunSummary s = summarize_run(recs, Slo{});
  RunInfo info;
  info.backend = "openai-completions";
  info.target = "http://x/<y>&z";
  info.dataset = "synthetic";
  info.load = "closed loop";

  const auto j = nlohmann::json::parse(report_json(info, s, recs).dump());
  CHECK(j["summary"]["completed"] == 17);
  CHECK(j["summary"]["failed"] == 1);
  CHECK(j["requests"].size() == 18);
  CHECK(j["requests"][17]["error_kind"] == "http_500");
  CHECK(j["requests"][3]["itl_s"].size() == 4);
  CHECK(j["summary"]["ttft"]["p50_ms"].get<double>() == Approx(s.ttft.p50 * 1e3));

  std::string why;
  const std::string cdf = cdf_svg("CDF <test>", {{"TTFT", {0.1, 0.2, 0.3}}, {"E2E", {}}});
  const bool cdf_ok = well_formed_xml(cdf, &why);
  INFO(why);
  CHECK(cdf_ok);
  CHECK(cdf.find("<polyline") != std::string::npos);
  CHECK(well_formed_xml(timeline_svg("t", "tok/s", {1, 5, 0, 3}, 1.0), &why));
  CHECK(well_formed_xml(timeline_svg("empty", "tok/s", {}, 1.0), &why));
  const std::string html = report_html(info, s, recs);
  const bool html_ok = well_formed_xml(html, &why);
  INFO(why);
  CHECK(html_ok);
  CHECK(html.find("http://x/&lt;y&gt;&amp;z") != std::string::npos);
  // Self-contained: no scripts, stylesheets or images from elsewhere.
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("href=") == std::string::npos);
  CHECK(format_table(info, s).find("http_500") != std::string::npos);
  CHECK(xml_escape("a<b>&\"'") == "a&lt;b&gt;&amp;&quot;&#39;");
}
