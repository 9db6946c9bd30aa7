// A small in-house Prometheus registry (prometheus-cpp is not packaged): counters, gauges and
// histograms, each a family with an optional fixed set of label names, rendered in the text
// exposition format 0.0.4 ("text/plain; version=0.0.4").
//
// What callers may rely on:
//   - Every method is thread-safe. Counter and Gauge updates are lock-free atomics; a histogram
//     observation takes one short per-series lock, so a scrape never sees a histogram whose
//     _count differs from its +Inf bucket.
//   - References returned by Family::labels() / Family::get() stay valid for the registry's
//     lifetime: hot paths may look a series up once and keep the reference.
//   - Families render in registration order; series of a family in ascending order of their
//     label values, so the output is deterministic.
//   - Names are checked at registration (metric: [a-zA-Z_:][a-zA-Z0-9_:]*, label:
//     [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__"; "le" is reserved for histograms); a bad
//     or duplicate name, bad buckets or a wrong number of label values throw
//     Error(kInvalidArgument).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sampan::server::metrics {

// A monotonically increasing total.
class Counter {
 public:
  // v must be >= 0 (negative or NaN increments are ignored: a counter never goes down).
  void inc(double v = 1);
  // For counters whose truth is a cumulative count kept elsewhere (e.g. engine statistics
  // copied at scrape time): sets the total outright.
  void mirror(double total) { value_.store(total, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  void dec(double v = 1) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets with inclusive upper bounds (v <= le), plus their sum.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending, finite, no +Inf
  void observe(double v);  // NaN is ignored

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // [upper_bounds.size() + 1]: last is the +Inf bucket
    double sum = 0;
    uint64_t count = 0;  // == cumulative.back()
  };
  Snapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], not cumulative; last: above all bounds
  double sum_ = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// One metric name with its HELP text and label names; holds one series per label-value tuple.
template <typename M>
class Family {
 public:
  // The series for these label values (one per label name, in order), created on first use.
  M& labels(const std::vector<std::string>& values);
  // The single series of a family without labels.
  M& get() { return labels({}); }

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Internal (Registry): snapshot of (label values, series) pairs in ascending label order.
  std::vector<std::pair<std::vector<std::string>, const M*>> series() const;
  Family(std::string name, std::vector<std::string> label_names,
         std::function<std::unique_ptr<M>()> make);

 private:
  std::string name_;
  std::vector<std::string> label_names_;
  std::function<std::unique_ptr<M>()> make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> series_;
};
extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Counter names conventionally end in "_total"; the name is used exactly as given.
  Family<Counter>& counter(const std::string& name, const std::string& help,
                           std::vector<std::string> label_names = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help,
                       std::vector<std::string> label_names = {});
  // upper_bounds: strictly ascending finite values; the +Inf bucket is implicit.
  Family<Histogram>& histogram(const std::string& name, const std::string& help,
                               std::vector<double> upper_bounds,
                               std::vector<std::string> label_names = {});

  // Runs before every render(), on the scraping thread: the place to copy values that live
  // elsewhere (engine statistics) into gauges. Hooks must not call render().
  void add_collect_hook(std::function<void()> hook);

  // The whole exposition. Families without labels always show their one series (0 until
  // updated); labelled families show HELP and TYPE even before their first series exists.
  std::string render() const;

 private:
  struct Entry;
  void check_new_name(const std::string& name, const std::vector<std::string>& label_names,
                      bool histogram) const;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<std::function<void()>> hooks_;
};

// The Prometheus spelling of a sample value: the shortest decimal that reads back as the same
// double ("0.1", "1e-05", "3"), and "+Inf", "-Inf", "NaN".
std::string format_value(double v);
// Label values: backslash, double quote and newline escaped as \\ \" \n.
std::string escape_label_value(std::string_view s);
// HELP text: backslash and newline escaped as \\ \n.
std::string escape_help(std::string_view s);
// start, start*factor, ..., count values (count >= 1, start > 0, factor > 1).
std::vector<double> exponential_buckets(double start, double factor, int count);

}  // namespace sampan::server::metrics
