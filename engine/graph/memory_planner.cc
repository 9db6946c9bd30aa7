#include "engine/graph/memory_planner.h"

#include <algorithm>
#include <numeric>

namespace sampan::graph {

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, int64_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  auto aligned = [&](int64_t b) { return (b + alignment - 1) / alignment * alignment; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });
  std::vector<size_t> placed;
  struct Span {
    int64_t begin, end;
  };
  std::vector<Span> busy;
  for (size_t r : order) {
    const BufferRequest& req = requests[r];
    const int64_t size = aligned(req.bytes);
    plan.naive_bytes += size;
    busy.clear();
    for (size_t p : placed) {
      const BufferRequest& o = requests[p];
      if (o.first_use <= req.last_use && req.first_use <= o.last_use) {
        busy.push_back({plan.offsets[p], plan.offsets[p] + aligned(o.bytes)});
      }
    }
    std::sort(busy.begin(), busy.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    // Best fit: the smallest gap between time-overlapping buffers that holds this one.
    int64_t best = -1, best_gap = 0, cursor = 0;
    for (const Span& s : busy) {
      const int64_t gap = s.begin - cursor;
      if (gap >= size && (best < 0 || gap < best_gap)) {
        best = cursor;
        best_gap = gap;
      }
      cursor = std::max(cursor, s.end);
    }
    plan.offsets[r] = best >= 0 ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[r] + size);
    placed.push_back(r);
  }
  return plan;
}

}  // namespace sampan::graph
