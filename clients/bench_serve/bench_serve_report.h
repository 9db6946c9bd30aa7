// `sampan bench-serve`: the run's results as a text table (stdout), JSON (every figure and every
// request), and a self-contained HTML page with inline SVG charts (no scripts, no external
// assets): latency CDFs of TTFT and E2E, and output throughput over time in 1 s bins.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "clients/bench_serve/bench_serve_stats.h"

namespace sampan::bench {

// What the run was: shown in the table and the HTML, stored in the JSON's "config".
struct RunInfo {
  std::string backend, target, model, dataset, load;  // load: "closed loop, concurrency 8", ...
  nlohmann::ordered_json config = nlohmann::ordered_json::object();  // the flags as given
  double disconnect_fraction = 0;  // > 0: the disconnected count is shown even when 0
};

std::string format_table(const RunInfo& info, const RunSummary& s);

nlohmann::ordered_json summary_json(const RunSummary& s);
// {"config", "summary", "throughput_over_time", "requests": [...]}.
nlohmann::ordered_json report_json(const RunInfo& info, const RunSummary& s,
                                   const std::vector<RequestRecord>& records);

struct Series {
  std::string name;
  std::vector<double> values;
};

// A line chart of the empirical CDF of each series (x: milliseconds, y: fraction 0..1).
std::string cdf_svg(const std::string& title, const std::vector<Series>& series);
// A step chart of `per_bin` values against bin start times (x: seconds, y: value per second).
std::string timeline_svg(const std::string& title, const std::string& y_label,
                         const std::vector<double>& per_bin, double bin_s);

std::string report_html(const RunInfo& info, const RunSummary& s,
                        const std::vector<RequestRecord>& records);

// Text for XML/HTML: & < > " ' escaped.
std::string xml_escape(const std::string& text);

}  // namespace sampan::bench
