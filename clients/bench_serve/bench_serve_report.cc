#include "clients/bench_serve/bench_serve_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sampan::bench {
namespace {

using OJson = nlohmann::ordered_json;

constexpr double kBinS = 1.0;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};

OJson distribution_json(const Distribution& d) {
  // Milliseconds, as the table shows them.
  return OJson{{"count", d.count},     {"mean_ms", d.mean * 1e3}, {"p50_ms", d.p50 * 1e3},
               {"p90_ms", d.p90 * 1e3}, {"p99_ms", d.p99 * 1e3},  {"min_ms", d.min * 1e3},
               {"max_ms", d.max * 1e3}};
}

// A round step (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to `max`.
double nice_step(double max, int ticks) {
  if (!(max > 0)) return 1;
  const double raw = max / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

std::string number(double v) {
  if (std::fabs(v) >= 100 || v == std::floor(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

// The frame every chart shares: axes, ticks, labels. Plot area [kL, kW - kR] x [kT, kH - kB].
constexpr double kW = 640, kH = 320, kL = 64, kR = 16, kT = 32, kB = 44;

struct Frame {
  double x_max, y_max;
  double px(double x) const { return kL + (kW - kL - kR) * x / x_max; }
  double py(double y) const { return kH - kB - (kH - kT - kB) * y / y_max; }
};

std::string frame_svg(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const Frame& f, double x_step, double y_step) {
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"18\" font-size=\"14\" text-anchor=\"middle\">{3}</text>\n",
      kW, kH, kW / 2, xml_escape(title));
  for (double x = 0; x <= f.x_max * 1.0001; x += x_step) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        f.px(x), f.py(0), f.py(f.y_max), kH - kB + 14, number(x));
  }
  for (double y = 0; y <= f.y_max * 1.0001; y += y_step) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        f.px(0), f.py(y), f.px(f.x_max), kL - 6, f.py(y) + 4, number(y));
  }
  out += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>"
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{3}\" stroke=\"black\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\">{6}</text>\n"
      "<text x=\"14\" y=\"{7}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {7})\">{8}</text>\n",
      kL, kH - kB, kW - kR, kT, (kL + kW - kR) / 2, kH - 8, xml_escape(x_label),
      (kT + kH - kB) / 2, xml_escape(y_label));
  return out;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string format_table(const RunInfo& info, const RunSummary& s) {
  std::string out;
  auto row = [&](const std::string& k, const std::string& v) {
    out += fmt::format("{:<34}{:>16}\n", k, v);
  };
  out += fmt::format("{:=^50}\n", " bench-serve result ");
  row("Backend:", info.backend);
  row("Target:", info.target);
  if (!info.model.empty()) row("Model:", info.model);
  row("Dataset:", info.dataset);
  row("Load:", info.load);
  row("Successful requests:", std::to_string(s.completed));
  row("Failed requests:", std::to_string(s.failed));
  if (info.disconnect_fraction > 0 || s.disconnected > 0) {
    row("Requests disconnected on purpose:", std::to_string(s.disconnected));
  }
  row("Benchmark duration (s):", fmt::format("{:.2f}", s.duration_s));
  row("Total input tokens:", std::to_string(s.total_input_tokens));
  row("Total output tokens:", std::to_string(s.total_output_tokens));
  row("Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
  row("Goodput (req/s):", fmt::format("{:.2f}", s.goodput));
  row("Input token throughput (tok/s):", fmt::format("{:.2f}", s.input_throughput));
  row("Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
  out += fmt::format("{:-^50}\n", " latency (ms) ");
  out += fmt::format("{:<6}{:>11}{:>11}{:>11}{:>11}\n", "", "mean", "p50", "p90", "p99");
  auto lat = [&](const char* name, const Distribution& d) {
    out += fmt::format("{:<6}{:>11.2f}{:>11.2f}{:>11.2f}{:>11.2f}\n", name, d.mean * 1e3,
                       d.p50 * 1e3, d.p90 * 1e3, d.p99 * 1e3);
  };
  lat("TTFT", s.ttft);
  lat("TPOT", s.tpot);
  lat("ITL", s.itl);
  lat("E2E", s.e2e);
  if (!s.errors.empty()) {
    out += fmt::format("{:-^50}\n", " errors ");
    for (const auto& [kind, n] : s.errors) row(kind + ":", std::to_string(n));
  }
  if (s.usage_missing > 0) {
    row("Requests without usage:", std::to_string(s.usage_missing));
  }
  if (s.count_mismatches > 0) {
    row("Usage != streamed chunks:", std::to_string(s.count_mismatches));
  }
  out += std::string(50, '=') + "\n";
  return out;
}

OJson summary_json(const RunSummary& s) {
  OJson errors = OJson::object();
  for (const auto& [kind, n] : s.errors) errors[kind] = n;
  return OJson{{"completed", s.completed},
               {"failed", s.failed},
               {"disconnected", s.disconnected},
               {"duration_s", s.duration_s},
               {"total_input_tokens", s.total_input_tokens},
               {"total_output_tokens", s.total_output_tokens},
               {"request_throughput", s.request_throughput},
               {"input_throughput", s.input_throughput},
               {"output_throughput", s.output_throughput},
               {"goodput", s.goodput},
               {"good_requests", s.good_requests},
               {"usage_missing", s.usage_missing},
               {"count_mismatches", s.count_mismatches},
               {"ttft", distribution_json(s.ttft)},
               {"tpot", distribution_json(s.tpot)},
               {"itl", distribution_json(s.itl)},
               {"e2e", distribution_json(s.e2e)},
               {"errors", std::move(errors)}};
}

OJson report_json(const RunInfo& info, const RunSummary& s,
                  const std::vector<RequestRecord>& records) {
  OJson reqs = OJson::array();
  for (const RequestRecord& r : records) {
    OJson j{{"index", r.index},
            {"ok", r.ok},
            {"start_s", r.start_s},
            {"e2e_s", r.e2e_s},
            {"ttft_s", r.ttft_s() ? OJson(*r.ttft_s()) : OJson(nullptr)},
            {"tpot_s", r.tpot_s() ? OJson(*r.tpot_s()) : OJson(nullptr)},
            {"input_tokens", r.input_tokens >= 0 ? OJson(r.input_tokens) : OJson(nullptr)},
            {"output_tokens", r.output_tokens >= 0 ? OJson(r.output_tokens) : OJson(nullptr)},
            {"counted_tokens", r.counted_tokens()},
            {"max_tokens", r.max_tokens},
            {"expected_input_tokens",
             r.expected_input_tokens >= 0 ? OJson(r.expected_input_tokens) : OJson(nullptr)}};
    OJson itl = OJson::array();
    for (size_t i = 1; i < r.chunk_s.size(); ++i) itl.push_back(r.chunk_s[i] - r.chunk_s[i - 1]);
    j["itl_s"] = std::move(itl);
    j["chunk_s"] = r.chunk_s;
    j["chunk_tokens"] = r.chunk_tokens;
    if (r.disconnected) {
      j["disconnected"] = true;
    } else if (!r.ok) {
      j["error_kind"] = r.error_kind;
      j["error"] = r.error;
    }
    reqs.push_back(std::move(j));
  }
  return OJson{{"config", info.config},
               {"backend", info.backend},
               {"target", info.target},
               {"model", info.model},
               {"dataset", info.dataset},
               {"load", info.load},
               {"summary", summary_json(s)},
               {"throughput_over_time",
                {{"bin_s", kBinS},
                 {"output_tokens_per_s", output_tokens_per_bin(records, kBinS)},
                 {"requests_finished_per_s", finished_per_bin(records, kBinS)}}},
               {"requests", std::move(reqs)}};
}

std::string cdf_svg(const std::string& title, const std::vector<Series>& series) {
  double x_max = 0;
  for (const Series& s : series) {
    for (double v : s.values) x_max = std::max(x_max, v * 1e3);
  }
  const double x_step = nice_step(x_max, 8);
  Frame f{std::max(x_step, std::ceil(x_max / x_step) * x_step), 1.0};
  std::string out = frame_svg(title, "milliseconds", "fraction of requests", f, x_step, 0.2);
  for (size_t k = 0; k < series.size(); ++k) {
    std::vector<double> v = series[k].values;
    std::sort(v.begin(), v.end());
    const char* color = kColors[k % std::size(kColors)];
    if (!v.empty()) {
      // The empirical CDF as a staircase: it rises by 1/n at every sample.
      std::string pts = fmt::format("{:.1f},{:.1f}", f.px(0), f.py(0));
      for (size_t i = 0; i < v.size(); ++i) {
        const double x = f.px(v[i] * 1e3);
        pts += fmt::format(" {:.1f},{:.1f} {:.1f},{:.1f}", x,
                           f.py(static_cast<double>(i) / static_cast<double>(v.size())), x,
                           f.py(static_cast<double>(i + 1) / static_cast<double>(v.size())));
      }
      out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                         color, pts);
    }
    out += fmt::format(
        "<rect x=\"{0:.1f}\" y=\"{1:.1f}\" width=\"10\" height=\"10\" fill=\"{2}\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\">{5} (n={6})</text>\n",
        kW - kR - 150, kH - kB - 40 - 16.0 * static_cast<double>(k), color, kW - kR - 135,
        kH - kB - 31 - 16.0 * static_cast<double>(k), xml_escape(series[k].name), v.size());
  }
  return out + "</svg>\n";
}

std::string timeline_svg(const std::string& title, const std::string& y_label,
                         const std::vector<double>& per_bin, double bin_s) {
  double y_max = 0;
  for (double v : per_bin) y_max = std::max(y_max, v / bin_s);
  const double x_total = std::max(1.0, static_cast<double>(per_bin.size()) * bin_s);
  const double x_step = nice_step(x_total, 10);
  const double y_step = nice_step(y_max, 5);
  Frame f{std::ceil(x_total / x_step) * x_step, std::max(y_step, std::ceil(y_max / y_step) * y_step)};
  std::string out = frame_svg(title, "seconds since start", y_label, f, x_step, y_step);
  std::string pts = fmt::format("{:.1f},{:.1f}", f.px(0), f.py(0));
  for (size_t i = 0; i < per_bin.size(); ++i) {
    const double y = f.py(per_bin[i] / bin_s);
    pts += fmt::format(" {:.1f},{:.1f} {:.1f},{:.1f}", f.px(static_cast<double>(i) * bin_s), y,
                       f.px(static_cast<double>(i + 1) * bin_s), y);
  }
  pts += fmt::format(" {:.1f},{:.1f}", f.px(static_cast<double>(per_bin.size()) * bin_s), f.py(0));
  out += fmt::format(
      "<polyline fill=\"#1f77b4\" fill-opacity=\"0.25\" stroke=\"#1f77b4\" stroke-width=\"1.5\" "
      "points=\"{}\"/>\n",
      pts);
  return out + "</svg>\n";
}

std::string report_html(const RunInfo& info, const RunSummary& s,
                        const std::vector<RequestRecord>& records) {
  std::vector<double> ttft, e2e;
  for (const RequestRecord& r : records) {
    if (!r.ok) continue;
    if (const auto t = r.ttft_s()) ttft.push_back(*t);
    e2e.push_back(r.e2e_s);
  }
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
      "<title>sampan bench-serve</title>\n<style>\n"
      "body{font-family:sans-serif;margin:2em;color:#222}"
      "table{border-collapse:collapse;margin:1em 0}"
      "td,th{border:1px solid #ccc;padding:3px 10px;text-align:right}"
      "td:first-child,th:first-child{text-align:left}"
      "svg{display:block;margin:1em 0}\n</style>\n</head>\n<body>\n"
      "<h1>sampan bench-serve</h1>\n";
  out += "<table>\n";
  auto row = [&](const std::string& k, const std::string& v) {
    out += "<tr><td>" + xml_escape(k) + "</td><td>" + xml_escape(v) + "</td></tr>\n";
  };
  row("Backend", info.backend);
  row("Target", info.target);
  row("Model", info.model);
  row("Dataset", info.dataset);
  row("Load", info.load);
  row("Successful requests", std::to_string(s.completed));
  row("Failed requests", std::to_string(s.failed));
  if (info.disconnect_fraction > 0 || s.disconnected > 0) {
    row("Disconnected on purpose", std::to_string(s.disconnected));
  }
  row("Duration (s)", fmt::format("{:.2f}", s.duration_s));
  row("Total input tokens", std::to_string(s.total_input_tokens));
  row("Total output tokens", std::to_string(s.total_output_tokens));
  row("Request throughput (req/s)", fmt::format("{:.2f}", s.request_throughput));
  row("Goodput (req/s)", fmt::format("{:.2f}", s.goodput));
  row("Input throughput (tok/s)", fmt::format("{:.2f}", s.input_throughput));
  row("Output throughput (tok/s)", fmt::format("{:.2f}", s.output_throughput));
  for (const auto& [kind, n] : s.errors) row("Errors: " + kind, std::to_string(n));
  out += "</table>\n<table>\n<tr><th>latency (ms)</th><th>mean</th><th>p50</th><th>p90</th>"
         "<th>p99</th></tr>\n";
  auto lat = [&](const char* name, const Distribution& d) {
    out += fmt::format("<tr><td>{}</td><td>{:.2f}</td><td>{:.2f}</td><td>{:.2f}</td><td>{:.2f}"
                       "</td></tr>\n",
                       name, d.mean * 1e3, d.p50 * 1e3, d.p90 * 1e3, d.p99 * 1e3);
  };
  lat("TTFT", s.ttft);
  lat("TPOT", s.tpot);
  lat("ITL", s.itl);
  lat("E2E", s.e2e);
  out += "</table>\n";
  out += cdf_svg("Latency CDF", {{"TTFT", ttft}, {"E2E", e2e}});
  out += timeline_svg("Output throughput (1 s bins)", "tokens/s",
                      output_tokens_per_bin(records, kBinS), kBinS);
  out += timeline_svg("Finished requests (1 s bins)", "requests/s",
                      finished_per_bin(records, kBinS), kBinS);
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace sampan::bench
