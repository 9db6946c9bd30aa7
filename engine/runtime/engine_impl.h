// The Engine's private state (engine.h is the public side): the caller-side API and the engine
// thread's loop (engine.cc) over the three jobs of a step — the scheduler (scheduler.h: which
// tokens run), the model runner (model_runner.h: the forward) and the output processor
// (output_processor.h: sampling, stops, events). Not installed; engine code only.
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

#include "engine/runtime/engine.h"
#include "engine/runtime/kv_block_manager.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/output_processor.h"
#include "engine/runtime/grammar_constraint.h"
#include "engine/runtime/json_constraint.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/sequence.h"

namespace sampan::runtime {

struct Engine::Impl {
  EngineOptions options;
  std::string model_dir;
  Engine::ModelInfo info;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  int64_t max_model_len = 0;
  int64_t num_blocks = 0;  // for sequences; the pools hold one more when padding decode steps
  std::vector<int32_t> eos_ids;  // tokenizer + config eos ids (generate.cc's rule)
  // Each token's bytes for JSON mode (json_constraint.h), built by the first json_object
  // request's submit (any caller thread; once).
  mutable std::once_flag token_bytes_once;
  mutable std::shared_ptr<const TokenBytes> token_bytes;

  // Engine-thread state: the three jobs of a step.
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<BlockManager> blocks;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<OutputProcessor> output;
  WaitingQueue waiting_queue;  // the scheduler's view of `waiting`
  int64_t steps = 0;

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
  void on_final_event();
  void publish_stats();
  std::unique_ptr<Sequence> validate(EngineRequest&& req, EventCallback&& cb) const;
};

}  // namespace sampan::runtime
