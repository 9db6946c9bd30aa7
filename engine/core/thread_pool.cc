#include "engine/core/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>

namespace sampan {

int ThreadPool::hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads) {
  n_threads_ = n_threads > 0 ? n_threads : hardware_threads();
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current() {
  const auto& fn = *fn_.load(std::memory_order_relaxed);
  const int64_t n = n_tasks_.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t t = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (t >= n) break;
    fn(t);
  }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  bool expected = false;
  if (workers_.empty() || n_tasks == 1 || !running_.compare_exchange_strong(expected, true)) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  // No worker is inside a section here (the previous run waited for in_flight_ == 0), so the
  // fields can be written; workers read them only after seeing the new generation.
  fn_.store(&fn, std::memory_order_relaxed);
  n_tasks_.store(n_tasks, std::memory_order_relaxed);
  next_task_.store(0, std::memory_order_relaxed);
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gen = generation_.fetch_add(1) + 1;
  }
  wake_.notify_all();
  work_on_current();
  // Every task is claimed. Close the section, then wait only for the workers inside it (each
  // finishing a task it claimed), never for one that has not woken yet: on a loaded machine a
  // descheduled worker would otherwise hold every parallel section until the OS runs it. A
  // worker entering after the close sees it and stays out (the entry protocol in worker_loop:
  // in_flight_ then closed_, against closed_ then in_flight_ here, all sequentially consistent).
  closed_.store(gen);
  while (in_flight_.load() != 0) _mm_pause();
  running_.store(false);
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a short while (tens of microseconds) before blocking.
    // stop_ is checked too: a worker that joined a section late can have taken the
    // destructor's generation bump as that section's ("seen" below), and would then wait for a
    // generation that never comes (seen as a hang in ~ThreadPool under load).
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && !stop_.load() && spin < 20000; ++spin) {
      _mm_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen && !stop_.load()) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] {
        return generation_.load(std::memory_order_acquire) != seen || stop_.load();
      });
    }
    if (stop_.load()) return;
    in_flight_.fetch_add(1);
    // The generation read after entering is the section joined: its fields were written before
    // it was published, and run() cannot start another until this worker leaves.
    gen = generation_.load();
    if (closed_.load() != gen) work_on_current();
    in_flight_.fetch_sub(1);
    seen = gen;
  }
}

}  // namespace sampan
