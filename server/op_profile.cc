#include "server/op_profile.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace sampan::cli {

void print_op_profile(std::FILE* out, const graph::Graph& g, const std::vector<double>& seconds,
                      int64_t per, const char* unit) {
  std::map<std::string, double> by_op;
  std::vector<std::pair<double, size_t>> by_node;
  double total = 0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const double ms = seconds[i] * 1e3 / static_cast<double>(per);
    by_op[g.nodes()[i].op] += ms;
    by_node.push_back({ms, i});
    total += ms;
  }
  std::vector<std::pair<double, std::string>> ops;
  for (const auto& [op, ms] : by_op) ops.push_back({ms, op});
  std::sort(ops.rbegin(), ops.rend());
  fmt::print(out, "profile: {:.3f} ms per {} in kernels\n", total, unit);
  for (const auto& [ms, op] : ops) {
    fmt::print(out, "  {:<20} {:9.3f} ms {:5.1f} %\n", op, ms, total > 0 ? 100 * ms / total : 0.0);
  }
  std::sort(by_node.rbegin(), by_node.rend());
  for (size_t k = 0; k < by_node.size() && k < 10; ++k) {
    const graph::Node& n = g.nodes()[by_node[k].second];
    fmt::print(out, "  node {:<40} {:<12} {:9.3f} ms\n", n.name, n.op, by_node[k].first);
  }
}

}  // namespace sampan::cli
