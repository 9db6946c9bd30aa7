// One request's state inside the serving Engine: its tokens, how many of them have K/V in the
// paged cache, its blocks, and the per-request sampling and streaming-text state. Owned and
// touched by the engine thread only (after submit() hands it over).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/kv_block_manager.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace sampan::runtime {

using EngineClock = std::chrono::steady_clock;

inline double seconds_since(EngineClock::time_point t0) {
  return std::chrono::duration<double>(EngineClock::now() - t0).count();
}

struct Sequence {
  uint64_t handle = 0;  // also the arrival order: handles increase with every submit()
  EngineRequest request;
  EventCallback on_event;
  EngineClock::time_point submitted;
  std::optional<EngineClock::time_point> deadline;

  // prompt + generated. The last generated token has no K/V yet: it is the next one to run.
  // After a preemption the whole list is recomputed as if it were a prompt.
  std::vector<int32_t> tokens;
  int64_t n_prompt = 0;
  int64_t n_computed = 0;  // tokens[0 .. n_computed) have K/V in `blocks`
  SeqBlocks blocks;

  std::unique_ptr<Sampler> sampler;
  // Sampled on the GPU (device_sampler.h) instead of by `sampler`: the engine runs on CUDA with
  // device sampling on and the request asks for nothing the GPU does not do.
  bool device_sampling = false;
  uint64_t device_seed = 0;  // the request's seed, or one drawn at submit
  std::unique_ptr<tok::StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stops;
  std::vector<int32_t> stop_ids;  // request stop ids + eos ids (unless ignore_eos)
  // The LoRA adapter its tokens run through: an index into the model's adapters
  // (ModelBuildOptions::lora), -1 for the base (EngineRequest::lora). Its K/V depend on it, so
  // blocks.ns = lora_adapter + 1 keeps the prefix cache from sharing blocks across adapters.
  int32_t lora_adapter = -1;

  // Prompt logprobs (EngineRequest::prompt_logprobs >= 0): the scores of prompt tokens
  // 1 .. prompt_lp.size(), in order; complete at n_prompt - 1 entries, which the first event
  // takes (the first draw comes after the whole prompt is scored).
  std::vector<SampleResult> prompt_lp;
  bool prompt_lp_sent = false;
  // Positions whose logits are still to be scored: [prompt_lp.size(), n_prompt - 1), until the
  // first event (a sequence preempted later recomputes its prompt without scoring it again).
  bool wants_prompt_rows() const {
    return request.prompt_logprobs >= 0 && !prompt_lp_sent &&
           static_cast<int64_t>(prompt_lp.size()) < n_prompt - 1;
  }

  bool admitted_once = false;
  bool finished = false;  // its final event is sent; the scheduler drops it
  int64_t cached_prompt_tokens = 0;
  double queue_s = 0;
  double first_token_s = 0;

  int64_t n_generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
  int64_t n_pending() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
};

}  // namespace sampan::runtime
