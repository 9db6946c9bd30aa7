// TensorSession: runs a classic model (ONNX: one forward, named tensors in, named tensors out)
// for many callers at once. It owns the Model, one ThreadPool for the kernels and a small pool
// of graph::Executors, each on its own worker thread: up to `executors` requests run at the same
// time (the first to reach the pool uses its threads; a concurrent one runs its kernels on its
// own worker, since ThreadPool::run from a second thread runs serially), later ones wait in a
// bounded queue. Inputs are checked against the model's signature before they are queued, so a
// malformed request is refused with one line naming the input and never reaches an executor; a
// run that fails (an id out of range found by a gather) is an Error for that request only, and
// its executor is rebuilt before the next one. Outputs are copied out of the executor's arena.
//
// Dynamic batching (TensorSessionOptions::max_batch > 1): a worker that takes a request keeps
// collecting queued requests whose inputs match it in every dimension but the first, up to
// max_batch rows, for at most batch_delay after it took the first; it runs them as one batch
// (inputs concatenated along dimension 0) and hands each request its rows of every output. Only
// for models whose every input and output has the same symbolic first dimension, appearing
// nowhere else in the signature (batchable()); rows must not interact, which holds for the
// per-example models served this way (CNNs, BERT-style encoders). Results equal a run alone up
// to f32 summation order (the kernels may split a larger batch differently). A batch whose run
// fails is re-run request by request, so a bad request fails alone.
// Thread-safe.
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
  // Dynamic batching: rows (first-dimension entries) one run may merge from concurrent
  // requests; <= 1 is off. A request with more rows runs alone.
  int max_batch = 1;
  // How long a worker holding a request waits for more to merge with it.
  std::chrono::microseconds batch_delay{1000};
};

// What dynamic batching did (cumulative).
struct TensorBatchStats {
  int64_t runs = 0;      // executor runs (a merged batch counts once)
  int64_t requests = 0;  // requests answered by those runs
  int64_t rows = 0;      // first-dimension rows of those runs
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
  // Whether the signature allows merging requests (see the file comment), and why not.
  bool batchable() const { return batch_symbol_.has_value(); }
  const std::string& not_batchable_reason() const { return not_batchable_; }
  TensorBatchStats batch_stats() const;

 private:
  struct Job {
    std::map<std::string, Tensor> feeds;
    Done done;
    std::optional<Error> error;  // set when its run failed
  };
  void worker(size_t index);
  // Waits for queued requests that can join `batch` (lock held; released while waiting).
  void collect(std::unique_lock<std::mutex>& lock, std::vector<Job>& batch);
  // Runs `jobs` on executor `index` as one batch (or the single job as is) -> outputs per job.
  std::vector<std::vector<Tensor>> run_batch(size_t index, std::vector<Job>& jobs);
  std::vector<Tensor> run_one(size_t index, const std::map<std::string, Tensor>& feeds);

  std::shared_ptr<const models::Model> model_;
  TensorSessionOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<graph::Executor>> executors_;  // by worker
  std::vector<std::thread> workers_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Job> queue_;
  int64_t running_ = 0;       // requests taken by workers and not yet answered
  int64_t running_runs_ = 0;  // executor runs in progress (a merged batch is one)
  bool stopping_ = false;  // shutdown(): no new requests
  bool exiting_ = false;   // destructor: workers leave once the queue is empty
  int collecting_ = 0;     // workers waiting for requests to merge: idle workers leave the
                           // queue to them meanwhile
  TensorBatchStats stats_;
  std::optional<std::string> batch_symbol_;  // the shared first dimension, when batchable
  std::string not_batchable_;
};

}  // namespace sampan::runtime
