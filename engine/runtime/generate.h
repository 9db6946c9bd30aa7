// Text generation for one sequence: prompt ids in, streamed tokens and text out, with sampling,
// stop ids, stop strings and a token limit. The batched scheduler of the serving stack reuses
// Sampler, StreamDecoder and StopMatcher; this is the single-sequence loop of the CLI.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/runtime/causal_lm.h"
#include "engine/runtime/grammar.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace sampan::runtime {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  std::vector<int32_t> stop_ids;  // added to the tokenizer's eos ids unless ignore_eos
  bool ignore_eos = false;
  // Reuse the KV cache for the longest common prefix with what the model already holds (chat
  // turns re-send the whole conversation).
  bool reuse_prefix = true;
  // JSON mode (EngineRequest::json_object): the output is a JSON object, or a prefix of one.
  bool json_object = false;
  // EngineRequest::grammar: the output is a text of the grammar, or a prefix of one.
  std::shared_ptr<const Grammar> grammar;
};

enum class FinishReason { kStop, kLength };
const char* finish_reason_name(FinishReason r);  // "stop", "length"

struct GenerationEvent {
  int32_t token = 0;
  std::string text;     // newly final text (may be empty while UTF-8 or a stop prefix is held)
  SampleResult sample;  // chosen token's logprob and alternatives
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (a stop id is not included)
  std::string text;
  FinishReason finish = FinishReason::kLength;
  std::string stop_matched;     // the stop string, or empty
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose K/V were reused
  double prefill_seconds = 0, decode_seconds = 0;
};

// Runs the request on `lm` (its KV cache is reused and overwritten). `on_event` (may be empty) is
// called for every generated token in order. Throws Error(kInvalidArgument) for an empty prompt
// or one longer than the context.
GenerationResult generate(CausalLm& lm, const tok::Tokenizer& tokenizer,
                          const GenerationRequest& request,
                          const std::function<void(const GenerationEvent&)>& on_event);

}  // namespace sampan::runtime
