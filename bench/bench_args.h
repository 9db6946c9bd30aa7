// Small helpers shared by the benchmarks' command lines.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace sampan::bench {

// "a,b,,c" -> {"a", "b", "c"}: comma-separated items, empty ones dropped.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace sampan::bench
