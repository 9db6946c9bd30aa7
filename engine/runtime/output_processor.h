// The Engine's output processor: a step's output in, events out. For every scheduled chunk it
// advances the sequence (its computed tokens go to the prefix cache), samples the next token on
// the host (or takes the GPU's), detokenizes incrementally, matches stop strings and stop ids,
// applies the length limit, and sends the streaming and final events. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_set>

#include "engine/runtime/engine.h"
#include "engine/runtime/kv_block_manager.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/sequence.h"

namespace sampan::runtime {

class OutputProcessor {
 public:
  // on_final runs after every final event (the engine's accounting: active count, idle wake).
  OutputProcessor(BlockManager& blocks, int64_t vocab, int64_t max_model_len,
                  std::function<void()> on_final);

  // Applies the step's output to every sequence of the plan; returns those that finished (a
  // failed forward finishes all of them with the error).
  std::unordered_set<const Sequence*> process(const StepPlan& plan, const StepOutput& out);

  // Sends the final event and drops the sequence's blocks. The caller removes it from its list.
  void finish(Sequence& s, EngineFinish why, EngineEvent ev);

 private:
  void handle_logits(Sequence& s, const float* logits /* [vocab] */);
  void handle_device_sample(Sequence& s, int32_t id);
  void handle_sample(Sequence& s, SampleResult r);
  void emit(Sequence& s, const EngineEvent& ev);

  BlockManager& blocks_;
  int64_t vocab_ = 0;
  int64_t max_model_len_ = 0;
  std::function<void()> on_final_;
};

}  // namespace sampan::runtime
