// The one threading hook CPU kernels see. The engine's ThreadPool implements it; tests may
// pass SerialRunner. Keeping it an interface keeps kernels free of engine types.
#pragma once

#include <cstdint>
#include <functional>

namespace sampan::cpu {

class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  // Calls fn(task) for every task in [0, n_tasks), spread over the workers, and returns when
  // all are done. fn must be safe to call concurrently for distinct tasks.
  virtual void run(int64_t n_tasks, const std::function<void(int64_t task)>& fn) = 0;
  // Number of workers that run tasks at once (>= 1); kernels size their task split with it.
  virtual int concurrency() const = 0;
};

class SerialRunner final : public TaskRunner {
 public:
  void run(int64_t n_tasks, const std::function<void(int64_t)>& fn) override {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
  }
  int concurrency() const override { return 1; }
};

}  // namespace sampan::cpu
