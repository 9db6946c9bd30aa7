// TensorSession: runs a classic model (ONNX: one forward, named tensors in, named tensors out)
// for many callers at once. It owns the Model, one ThreadPool for the kernels and a small pool
// of graph::Executors, each on its own worker thread: up to `executors` requests run at the same
// time (the first to reach the pool uses its threads; a concurrent one runs its kernels on its
// own worker, since ThreadPool::run from a second thread runs serially), later ones wait in a
// bounded queue. Inputs are checked against the model's signature before they are queued, so a
// malformed request is refused with one line naming the input and never reaches an executor; a
// run that fails (an id out of range found by a gather) is an Error for that request only, and
// its executor is rebuilt before the next one. Outputs are copied out of the executor's arena.
// Thread-safe. Dynamic batching (merging concurrent requests along dimension 0) is not done.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/models/model.h"

namespace sampan {
class ThreadPool;
namespace graph {
class Executor;
}
}  // namespace sampan

namespace sampan::runtime {

struct TensorSessionOptions {
  int threads = 0;        // kernel threads of the shared pool (0: one per core)
  int executors = 2;      // requests that run at the same time (>= 1)
  int max_waiting = 256;  // queued requests beyond which submit() fails kResourceExhausted
};

class TensorSession {
 public:
  // `model` must be a classic model (every signature tensor has role kData). Builds every
  // executor now, so a graph the CPU backend cannot run fails here, at load.
  TensorSession(std::shared_ptr<const models::Model> model, TensorSessionOptions options = {});
  ~TensorSession();  // finishes the queued requests, then joins the workers
  TensorSession(const TensorSession&) = delete;
  TensorSession& operator=(const TensorSession&) = delete;

  const models::Model& model() const { return *model_; }
  const models::Signature& signature() const { return model_->signature; }
  const TensorSessionOptions& options() const { return options_; }

  // Checks `inputs` (keyed by the signature's api_name) against the signature: no unknown or
  // missing input, each one's dtype, rank and fixed dimensions, symbolic dimensions at least 1
  // and equal wherever one symbol appears. Throws Error(kInvalidArgument, field = the input's
  // name) with one line naming it. Returns the feeds keyed by graph value name.
  std::map<std::string, Tensor> validate(const std::map<std::string, Tensor>& inputs) const;

  // The outputs in signature order (each a contiguous CPU tensor of its own), or the error.
  using Done = std::function<void(std::vector<Tensor> outputs, std::optional<Error> error)>;
  // Validates (throws as validate() does, and Error(kResourceExhausted) when the queue is full,
  // Error(kUnavailable) after shutdown()), then queues the run; `done` is called once, on a
  // worker thread, and must not throw.
  void submit(const std::map<std::string, Tensor>& inputs, Done done);
  // submit() and wait: the outputs, or the run's Error thrown.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

  // Refuses new requests (kUnavailable); queued and running ones finish.
  void shutdown();
  // Waits until nothing is queued or running, up to `timeout`; true when idle.
  bool wait_idle(std::chrono::milliseconds timeout);
  int64_t running() const;
  int64_t waiting() const;

 private:
  struct Job {
    std::map<std::string, Tensor> feeds;
    Done done;
  };
  void worker(size_t index);

  std::shared_ptr<const models::Model> model_;
  TensorSessionOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<graph::Executor>> executors_;  // by worker
  std::vector<std::thread> workers_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Job> queue_;
  int64_t running_ = 0;
  bool stopping_ = false;  // shutdown(): no new requests
  bool exiting_ = false;   // destructor: workers leave once the queue is empty
};

}  // namespace sampan::runtime
