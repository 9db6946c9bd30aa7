// ThreadPool: every task of every section runs exactly once and its writes are visible when
// run() returns, also when workers wake late (more threads than cores, sleeping tasks), when a
// task calls run() again, and when two threads share a pool. Run under TSan too (label tsan).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "engine/core/thread_pool.h"

using sampan::ThreadPool;

TEST_CASE("thread pool runs every task exactly once across thousands of sections", "[thread_pool]") {
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    std::mt19937 rng(static_cast<unsigned>(threads));
    std::uniform_int_distribution<int> sizes(1, 97);
    int bad_sections = 0;
    for (int section = 0; section < 3000; ++section) {
      const int n = sizes(rng);
      std::vector<int> plain(static_cast<size_t>(n), 0);  // not atomic: run()'s return publishes it
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run(n, [&](int64_t t) {
        hits[static_cast<size_t>(t)].fetch_add(1, std::memory_order_relaxed);
        plain[static_cast<size_t>(t)] = static_cast<int>(t) + section;
      });
      bool ok = true;
      for (int t = 0; t < n; ++t) {
        ok = ok && hits[static_cast<size_t>(t)].load() == 1 && plain[static_cast<size_t>(t)] == t + section;
      }
      bad_sections += ok ? 0 : 1;
    }
    INFO(threads << " threads");
    CHECK(bad_sections == 0);
  }
}

TEST_CASE("thread pool waits for tasks still running on a slow worker", "[thread_pool]") {
  ThreadPool pool(3);
  for (int section = 0; section < 40; ++section) {
    std::vector<int> done(8, 0);
    pool.run(8, [&](int64_t t) {
      if (t % 3 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200 * (t + 1)));
      done[static_cast<size_t>(t)] = 1;
    });
    int sum = 0;
    for (int d : done) sum += d;
    CHECK(sum == 8);
  }
}

TEST_CASE("thread pool: a nested run and a run from a second thread complete serially", "[thread_pool]") {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run(4, [&](int64_t) { pool.run(3, [&](int64_t) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 12);

  std::atomic<int64_t> total{0};
  auto client = [&] {
    for (int i = 0; i < 500; ++i) pool.run(7, [&](int64_t t) { total.fetch_add(t + 1); });
  };
  std::thread other(client);
  client();
  other.join();
  CHECK(total.load() == 2 * 500 * 28);
}
