// The Engine's private state (engine.h is the public side), shared by engine.cc (loading, the
// caller-side API, the engine thread's loop and events) and engine_step.cc (one step:
// scheduling, the graph inputs, the forward, sampling). Not installed; engine code only.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/llama.h"
#include "engine/runtime/device_sampler.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sequence.h"

namespace sampan::runtime {

namespace engine_detail {

inline double seconds_since(EngineClock::time_point t0) {
  return std::chrono::duration<double>(EngineClock::now() - t0).count();
}

// A growable i32 buffer whose tensors view one allocation, so the per-step graph inputs cost no
// allocation once the largest batch has been seen.
class I32Input {
 public:
  int32_t* reserve(int64_t n) {
    if (!storage_ || capacity_ < n) {
      capacity_ = std::max<int64_t>(n, capacity_ * 2);
      storage_ = Storage::allocate(static_cast<size_t>(capacity_) * sizeof(int32_t), Device::cpu());
    }
    return static_cast<int32_t*>(storage_->data());
  }
  Tensor view(const Shape& shape) const { return Tensor::from_storage(storage_, 0, shape, DType::kI32); }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t capacity_ = 0;
};

// One scheduled piece of work: `n_tokens` tokens of `seq` starting at seq->n_computed.
struct Scheduled {
  Sequence* seq = nullptr;
  int64_t n_tokens = 0;
  int logit_row = -1;  // row of the logits output, or -1 when this chunk ends mid-prompt
  bool decode = false;
};

}  // namespace engine_detail

using engine_detail::I32Input;
using engine_detail::Scheduled;
using engine_detail::seconds_since;

struct Engine::Impl {
  EngineOptions options;
  std::string model_dir;
  HfConfig config;
  std::optional<WeightStore> store;  // mapped weights the graph's constants view
  models::LlamaWeights weights;
  graph::Graph graph;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<graph::Executor> executor;
  std::unique_ptr<DeviceSampler> device_sampler;  // CUDA with device_sampling only
  int64_t max_model_len = 0;
  int64_t num_blocks = 0;  // for sequences; the pools hold one more when pad_decode
  bool pad_decode = false;  // EngineOptions::pad_decode_steps, or CUDA graphs on a CUDA device
  std::vector<int32_t> eos_ids;  // tokenizer + config eos ids (generate.cc's rule)

  // Engine-thread state.
  std::unique_ptr<BlockManager> blocks;
  // Per layer [num_blocks, block_size, kv_dim] f32, or [.., kv_row_bytes] i8 for a quantized
  // cache (options.build.kv_cache_dtype).
  std::vector<Tensor> k_cache, v_cache;
  std::vector<std::unique_ptr<Sequence>> running;  // arrival order
  std::deque<std::unique_ptr<Sequence>> preempted;  // arrival order; admitted before `waiting`
  std::map<std::string, Tensor> inputs;
  I32Input in_ids, in_positions, in_seq_ids, in_block_tables, in_logit_rows;
  std::vector<Scheduled> batch;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t forwards_for_fault_injection = 0;  // EngineOptions::test_fault_every_n_steps

  // Shared with caller threads, guarded by `mu`.
  mutable std::mutex mu;
  std::condition_variable wake;  // engine thread: work arrived, cancel, stop
  std::condition_variable idle;  // wait_idle()
  std::deque<std::unique_ptr<Sequence>> waiting;
  std::unordered_set<uint64_t> cancel_requests;
  bool cancel_everything = false;
  bool stop = false;
  bool accepting = true;
  int64_t n_active = 0;  // submitted and not yet given their final event
  int n_preempted_shared = 0;
  uint64_t next_handle = 1;
  EngineStats published;
  std::function<void(const StepStats&)> step_observer;

  std::thread thread;

  void load_model();
  void thread_main();
  void step();
  void take_cancellations();
  void schedule();
  bool admit_one(int64_t& budget);
  void preempt_last();
  void run_batch();
  bool fill_padded_decode();
  void fill_step(int64_t n_tokens, int64_t max_blocks, int n_out);
  void handle_logits(Sequence& s, const float* logits);
  void handle_device_sample(Sequence& s, int32_t id);
  void handle_sample(Sequence& s, SampleResult r);
  std::vector<int32_t> sample_on_device(const Tensor& logits);
  void finish(Sequence& s, EngineFinish why, EngineEvent ev);
  void remove_finished(const std::unordered_set<const Sequence*>& done);
  void publish_stats();
  void emit(Sequence& s, const EngineEvent& ev);
  std::unique_ptr<Sequence> validate(EngineRequest&& req, EventCallback&& cb) const;
};

}  // namespace sampan::runtime
