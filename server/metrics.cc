#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"

namespace sampan::server::metrics {

void Counter::inc(double v) {
  if (!(v >= 0)) return;  // also rejects NaN
  value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  // Buckets are few (~20): a binary search for the first bound >= v keeps le inclusive.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.cumulative.resize(counts_.size());
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t run = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    run += counts_[i];
    s.cumulative[i] = run;
  }
  s.sum = sum_;
  s.count = run;
  return s;
}

template <typename M>
Family<M>::Family(std::string name, std::vector<std::string> label_names,
                  std::function<std::unique_ptr<M>()> make)
    : name_(std::move(name)), label_names_(std::move(label_names)), make_(std::move(make)) {}

template <typename M>
M& Family<M>::labels(const std::vector<std::string>& values) {
  SAMPAN_CHECK(values.size() == label_names_.size(), ErrorCode::kInvalidArgument,
               "metric {}: {} label values given for {} label names", name_, values.size(),
               label_names_.size());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(values);
  if (it == series_.end()) it = series_.emplace(values, make_()).first;
  return *it->second;
}

template <typename M>
std::vector<std::pair<std::vector<std::string>, const M*>> Family<M>::series() const {
  std::vector<std::pair<std::vector<std::string>, const M*>> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.reserve(series_.size());
  for (const auto& [values, m] : series_) out.emplace_back(values, m.get());
  return out;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

struct Registry::Entry {
  MetricType type;
  std::string name;
  std::string help;
  std::unique_ptr<Family<Counter>> counter;
  std::unique_ptr<Family<Gauge>> gauge;
  std::unique_ptr<Family<Histogram>> histogram;
};

namespace {

bool valid_metric_name(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(const std::string& s) {
  if (s.empty() || s.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"` without the closing brace, or "" when there are no labels; histogram buckets
// append their le label before closing.
std::string label_block(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "{" : ",";
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  return out;
}

std::string close_block(const std::string& open) { return open.empty() ? std::string() : open + "}"; }

}  // namespace

Registry::Registry() = default;
Registry::~Registry() = default;

void Registry::check_new_name(const std::string& name, const std::vector<std::string>& label_names,
                              bool histogram) const {
  SAMPAN_CHECK(valid_metric_name(name), ErrorCode::kInvalidArgument, "metric name '{}' is not valid", name);
  for (size_t i = 0; i < label_names.size(); ++i) {
    const std::string& l = label_names[i];
    SAMPAN_CHECK(valid_label_name(l), ErrorCode::kInvalidArgument, "metric {}: label name '{}' is not valid",
                 name, l);
    SAMPAN_CHECK(!(histogram && l == "le"), ErrorCode::kInvalidArgument,
                 "metric {}: label name 'le' is reserved for histogram buckets", name);
    for (size_t j = 0; j < i; ++j) {
      SAMPAN_CHECK(label_names[j] != l, ErrorCode::kInvalidArgument, "metric {}: label '{}' given twice", name, l);
    }
  }
  // A histogram also owns NAME_bucket, NAME_sum and NAME_count: those must not collide either.
  auto names_of = [](const std::string& n, bool hist) {
    std::vector<std::string> v{n};
    if (hist) {
      for (const char* s : {"_bucket", "_sum", "_count"}) v.push_back(n + s);
    }
    return v;
  };
  const auto mine = names_of(name, histogram);
  for (const auto& e : entries_) {
    for (const auto& theirs : names_of(e->name, e->type == MetricType::kHistogram)) {
      SAMPAN_CHECK(std::find(mine.begin(), mine.end(), theirs) == mine.end(), ErrorCode::kInvalidArgument,
                   "metric {}: the name '{}' is already registered", name, theirs);
    }
  }
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help,
                                   std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  check_new_name(name, label_names, false);
  auto e = std::make_unique<Entry>();
  e->type = MetricType::kCounter;
  e->name = name;
  e->help = help;
  e->counter = std::make_unique<Family<Counter>>(name, std::move(label_names),
                                                 [] { return std::make_unique<Counter>(); });
  if (e->counter->label_names().empty()) e->counter->get();
  entries_.push_back(std::move(e));
  return *entries_.back()->counter;
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help,
                               std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  check_new_name(name, label_names, false);
  auto e = std::make_unique<Entry>();
  e->type = MetricType::kGauge;
  e->name = name;
  e->help = help;
  e->gauge = std::make_unique<Family<Gauge>>(name, std::move(label_names),
                                             [] { return std::make_unique<Gauge>(); });
  if (e->gauge->label_names().empty()) e->gauge->get();
  entries_.push_back(std::move(e));
  return *entries_.back()->gauge;
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       std::vector<double> upper_bounds,
                                       std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  check_new_name(name, label_names, true);
  SAMPAN_CHECK(!upper_bounds.empty(), ErrorCode::kInvalidArgument, "histogram {}: no buckets", name);
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    SAMPAN_CHECK(std::isfinite(upper_bounds[i]), ErrorCode::kInvalidArgument,
                 "histogram {}: bucket bound {} is not finite (+Inf is implicit)", name,
                 format_value(upper_bounds[i]));
    SAMPAN_CHECK(i == 0 || upper_bounds[i] > upper_bounds[i - 1], ErrorCode::kInvalidArgument,
                 "histogram {}: bucket bounds must be strictly ascending", name);
  }
  auto e = std::make_unique<Entry>();
  e->type = MetricType::kHistogram;
  e->name = name;
  e->help = help;
  e->histogram = std::make_unique<Family<Histogram>>(
      name, std::move(label_names), [b = std::move(upper_bounds)] { return std::make_unique<Histogram>(b); });
  if (e->histogram->label_names().empty()) e->histogram->get();
  entries_.push_back(std::move(e));
  return *entries_.back()->histogram;
}

void Registry::add_collect_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hooks_.push_back(std::move(hook));
}

std::string Registry::render() const {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hooks = hooks_;
  }
  for (const auto& h : hooks) h();

  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", e->name, escape_help(e->help), e->name, type_name(e->type));
    switch (e->type) {
      case MetricType::kCounter:
        for (const auto& [values, c] : e->counter->series()) {
          out += fmt::format("{}{} {}\n", e->name, close_block(label_block(e->counter->label_names(), values)),
                             format_value(c->value()));
        }
        break;
      case MetricType::kGauge:
        for (const auto& [values, g] : e->gauge->series()) {
          out += fmt::format("{}{} {}\n", e->name, close_block(label_block(e->gauge->label_names(), values)),
                             format_value(g->value()));
        }
        break;
      case MetricType::kHistogram:
        for (const auto& [values, h] : e->histogram->series()) {
          const std::string open = label_block(e->histogram->label_names(), values);
          const std::string le_prefix = open.empty() ? "{le=\"" : open + ",le=\"";
          const Histogram::Snapshot s = h->snapshot();
          const auto& bounds = h->upper_bounds();
          for (size_t i = 0; i < bounds.size(); ++i) {
            out += fmt::format("{}_bucket{}{}\"}} {}\n", e->name, le_prefix, format_value(bounds[i]), s.cumulative[i]);
          }
          out += fmt::format("{}_bucket{}+Inf\"}} {}\n", e->name, le_prefix, s.count);
          out += fmt::format("{}_sum{} {}\n", e->name, close_block(open), format_value(s.sum));
          out += fmt::format("{}_count{} {}\n", e->name, close_block(open), s.count);
        }
        break;
    }
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // fmt's default double format is the shortest string that parses back to the same value.
  return fmt::format("{}", v);
}

std::string escape_label_value(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string escape_help(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  SAMPAN_CHECK(count >= 1 && start > 0 && factor > 1, ErrorCode::kInvalidArgument,
               "exponential_buckets: need count >= 1, start > 0, factor > 1 (got {}, {}, {})", count, start,
               factor);
  std::vector<double> b;
  b.reserve(static_cast<size_t>(count));
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

}  // namespace sampan::server::metrics
