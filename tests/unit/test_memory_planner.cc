#include <catch2/catch.hpp>

#include <random>

#include "engine/graph/memory_planner.h"

using namespace sampan::graph;

namespace {

// Independent check: no two buffers alive at the same step overlap in memory, and every buffer
// fits inside the arena.
void check_plan(const std::vector<BufferRequest>& req, const MemoryPlan& plan) {
  REQUIRE(plan.offsets.size() == req.size());
  for (size_t i = 0; i < req.size(); ++i) {
    CHECK(plan.offsets[i] % 64 == 0);
    CHECK(plan.offsets[i] + req[i].bytes <= plan.arena_bytes);
    for (size_t j = i + 1; j < req.size(); ++j) {
      const bool time = req[i].first_use <= req[j].last_use && req[j].first_use <= req[i].last_use;
      const bool space = plan.offsets[i] < plan.offsets[j] + req[j].bytes &&
                         plan.offsets[j] < plan.offsets[i] + req[i].bytes;
      CHECK_FALSE((time && space && req[i].bytes > 0 && req[j].bytes > 0));
    }
  }
}

}  // namespace

TEST_CASE("a chain of buffers reuses memory", "[graph]") {
  // x0 -> x1 -> x2 -> x3: each buffer lives for two steps, so two slots suffice.
  std::vector<BufferRequest> req;
  for (int i = 0; i < 4; ++i) req.push_back({1000, i, i + 1});
  MemoryPlan plan = plan_memory(req);
  check_plan(req, plan);
  CHECK(plan.arena_bytes == 2 * 1024);
  CHECK(plan.naive_bytes == 4 * 1024);
}

TEST_CASE("random lifetimes never overlap and stay near the lower bound", "[graph]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> req;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 40);
      req.push_back({static_cast<int64_t>(1 + rng() % 100000), first,
                     first + static_cast<int>(rng() % 10)});
    }
    MemoryPlan plan = plan_memory(req);
    check_plan(req, plan);
    // Lower bound: the most bytes alive at any one step.
    int64_t bound = 0;
    for (int t = 0; t < 50; ++t) {
      int64_t live = 0;
      for (const auto& r : req) {
        if (r.first_use <= t && t <= r.last_use) live += (r.bytes + 63) / 64 * 64;
      }
      bound = std::max(bound, live);
    }
    CHECK(plan.arena_bytes >= bound);
    CHECK(plan.arena_bytes <= plan.naive_bytes);
  }
}
