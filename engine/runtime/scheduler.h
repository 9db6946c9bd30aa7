// The Engine's scheduler (engine.h states the policy): which sequences run in the next step and
// how many tokens each, under the token budget and the KV blocks it can reserve — admission
// FCFS, chunked prefill, preemption of the latest arrivals, prefix-cache hits. Its output is a
// StepPlan for the model runner; it runs no model and samples nothing. Engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_set>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/kv_block_manager.h"
#include "engine/runtime/sequence.h"

namespace sampan::runtime {

// One scheduled piece of work: `n_tokens` tokens of `seq` starting at seq->n_computed.
struct Scheduled {
  Sequence* seq = nullptr;
  int64_t n_tokens = 0;
  int logit_row = -1;  // row of the logits output, or -1 when this chunk ends mid-prompt
  bool decode = false;
  // Prompt logprobs: logit rows prompt_row .. prompt_row + n_prompt_rows - 1 hold the logits at
  // positions prompt_pos .. prompt_pos + n_prompt_rows - 1 (each scores the token after it).
  int prompt_row = -1;
  int n_prompt_rows = 0;
  int64_t prompt_pos = 0;
};

// What one step runs, in batch order (running sequences in arrival order, then admissions).
struct StepPlan {
  std::vector<Scheduled> batch;
  int64_t n_tokens = 0;    // sum of n_tokens
  int64_t max_blocks = 1;  // the longest block list of the batch
  int n_out = 0;           // logit rows: chunks that complete a prompt, decodes, prompt rows
  int n_decode = 0;
};

// Where new requests wait; owned by the engine and shared with caller threads, so it is reached
// through these (each takes the engine's lock itself).
struct WaitingQueue {
  std::function<std::unique_ptr<Sequence>()> pop_front;  // nullptr when empty
  std::function<void(std::unique_ptr<Sequence>)> push_front;
};

class Scheduler {
 public:
  Scheduler(const EngineOptions& options, BlockManager& blocks);

  // The next step's plan (empty batch when nothing can run). Sequences admitted for the first
  // time get their queue time and cached prompt tokens set.
  // The runner may fill in logit rows (padded decode steps); valid until the next call.
  StepPlan& plan(WaitingQueue& waiting);

  // Drops sequences that received their final event.
  void remove_finished(const std::unordered_set<const Sequence*>& done);

  // Arrival order; the engine sweeps them for cancellations and timeouts.
  std::vector<std::unique_ptr<Sequence>>& running() { return running_; }
  std::deque<std::unique_ptr<Sequence>>& preempted() { return preempted_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  bool admit_one(WaitingQueue& waiting, int64_t& budget);
  void preempt_last();

  const EngineOptions& options_;
  BlockManager& blocks_;
  std::vector<std::unique_ptr<Sequence>> running_;   // arrival order
  std::deque<std::unique_ptr<Sequence>> preempted_;  // arrival order; admitted before waiting
  StepPlan plan_;
  int64_t preemptions_ = 0;
};

}  // namespace sampan::runtime
