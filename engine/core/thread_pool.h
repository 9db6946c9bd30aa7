// A fixed pool of worker threads for CPU kernels. The calling thread works too, so a pool of
// n threads starts n - 1 workers. Workers spin briefly before sleeping: a decode step issues
// hundreds of short parallel sections and a condition-variable wake-up per section would cost
// more than the work.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/task_runner.h"

namespace sampan {

class ThreadPool final : public cpu::TaskRunner {
 public:
  // n_threads <= 0 means one per available core.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Not reentrant: a task must not call run() on the same pool (it would run serially).
  void run(int64_t n_tasks, const std::function<void(int64_t)>& fn) override;
  int concurrency() const override { return n_threads_; }

  static int hardware_threads();

 private:
  void worker_loop(int index);
  void work_on_current();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};  // guards against nested run() from inside a task

  // The current parallel section (generation_ numbers sections; closed_ is the last one whose
  // tasks are all claimed; in_flight_ counts workers inside a section).
  std::atomic<const std::function<void(int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> n_tasks_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<uint64_t> closed_{0};
  std::atomic<int> in_flight_{0};
};

}  // namespace sampan
