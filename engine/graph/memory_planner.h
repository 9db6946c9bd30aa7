// Static memory planning: intermediate buffers whose lifetimes do not overlap share memory in
// one arena. Offsets are assigned greedily, largest buffer first, each into the lowest gap
// that fits among buffers alive at the same time (the classic offset-assignment heuristic; it
// is within a few percent of the lower bound max_t(sum of live sizes) on transformer graphs).
#pragma once

#include <cstdint>
#include <vector>

namespace sampan::graph {

struct BufferRequest {
  int64_t bytes = 0;
  int first_use = 0;  // index of the producing step
  int last_use = 0;   // index of the last reading step (inclusive)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // one per request, aligned
  int64_t arena_bytes = 0;       // peak; what the arena must hold
  int64_t naive_bytes = 0;       // sum of all requests: the arena without reuse
};

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, int64_t alignment = 64);

}  // namespace sampan::graph
