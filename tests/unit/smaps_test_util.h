// Reads /proc/self/smaps for tests of how memory is mapped (huge pages, released pages).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace sampan::test {

// The number after `field` ("Rss:", "THPeligible:") in the smaps entry of the mapping holding
// `addr` (kB for sizes), or -1 where the mapping or the field is not listed.
inline int64_t smaps_field(const void* addr, const std::string& field) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind(field, 0) == 0) {
      return std::atoll(line.c_str() + field.size());
    }
  }
  return -1;
}

}  // namespace sampan::test
