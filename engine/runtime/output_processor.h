// The Engine's output processor: a step's output in, events out. For every scheduled chunk it
// advances the sequence (its computed tokens go to the prefix cache), samples the next token on
// the host (or takes the GPU's), detokenizes incrementally, matches stop strings and stop ids,
// applies the length limit, and sends the streaming and final events. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/kv_block_manager.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/sequence.h"

namespace sampan::runtime {

class OutputProcessor {
 public:
  // on_final runs after every final event (the engine's accounting: active count, idle wake).
  // sample_runner, when given, samples a step's host rows in parallel (each sequence has its own
  // Sampler and random state, so the tokens are those of one-by-one sampling); it must be idle
  // during process().
  OutputProcessor(BlockManager& blocks, int64_t vocab, int64_t max_model_len,
                  std::function<void()> on_final, ThreadPool* sample_runner = nullptr);

  // Applies the step's output to every sequence of the plan; returns those that finished (a
  // failed forward finishes all of them with the error).
  std::unordered_set<const Sequence*> process(const StepPlan& plan, const StepOutput& out);

  // Sends the final event and drops the sequence's blocks. The caller removes it from its list.
  void finish(Sequence& s, EngineFinish why, EngineEvent ev);

 private:
  // The host-sampled rows of the plan into samples_ / sample_errors_ (by batch index).
  void sample_host_rows(const StepPlan& plan, const StepOutput& out);
  void handle_device_sample(Sequence& s, int32_t id);
  void handle_sample(Sequence& s, SampleResult r);
  // Scores the plan's prompt rows into their sequences' prompt_lp
  // (EngineRequest::prompt_logprobs); a row that cannot be scored sets prompt_errors_.
  void score_prompt_rows(const StepPlan& plan, const StepOutput& out);
  // fn(0 .. n - 1) on the sample runner (in parallel) or in order.
  void run_rows(int64_t n, const std::function<void(int64_t)>& fn);
  // Calls the sequence's callback; the first event also carries its prompt logprobs.
  void emit(Sequence& s, EngineEvent& ev);

  BlockManager& blocks_;
  int64_t vocab_ = 0;
  int64_t max_model_len_ = 0;
  std::function<void()> on_final_;
  ThreadPool* sample_runner_ = nullptr;
  std::vector<size_t> host_rows_;           // batch indices sampled on the host this step
  std::vector<SampleResult> samples_;       // by batch index
  std::vector<std::string> sample_errors_;  // by batch index: what sample() threw
  struct PromptJob {
    size_t batch;  // index in the plan
    size_t base;   // the sequence's prompt_lp entries before this step
    int row;       // of the chunk's prompt rows
  };
  std::vector<PromptJob> prompt_jobs_;
  std::vector<std::string> prompt_errors_;  // by batch index: a prompt row's failure
};

}  // namespace sampan::runtime
