#include "engine/runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "engine/core/error.h"
#include "engine/runtime/grammar_constraint.h"
#include "engine/runtime/json_constraint.h"

namespace sampan::runtime {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
  }
  return "?";
}

GenerationResult generate(CausalLm& lm, const tok::Tokenizer& tokenizer,
                          const GenerationRequest& req,
                          const std::function<void(const GenerationEvent&)>& on_event) {
  using Clock = std::chrono::steady_clock;
  const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
  SAMPAN_CHECK(n_prompt > 0, ErrorCode::kInvalidArgument, "the prompt has no tokens");
  SAMPAN_CHECK(n_prompt < lm.capacity(), ErrorCode::kInvalidArgument,
               "the prompt has {} tokens; the context holds {}", n_prompt, lm.capacity());
  SAMPAN_CHECK(req.max_tokens >= 0, ErrorCode::kInvalidArgument, "max_tokens {} is negative",
               req.max_tokens);
  const int64_t vocab = lm.config().vocab_size;
  for (size_t i = 0; i < req.prompt.size(); ++i) {
    SAMPAN_CHECK(req.prompt[i] >= 0 && req.prompt[i] < vocab, ErrorCode::kInvalidArgument,
                 "prompt token {} ({}) is outside the vocabulary of {}", i, req.prompt[i], vocab);
  }
  check_logit_bias_ids(req.sampling, vocab);
  // The ids that end a text: stop ids unless ignore_eos, and JSON mode's end either way.
  std::vector<int32_t> eos = tokenizer.special().eos_ids;
  if (tokenizer.special().eos) eos.push_back(*tokenizer.special().eos);
  for (int64_t id : lm.config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  std::vector<int32_t> stop_ids = req.stop_ids;
  if (!req.ignore_eos) stop_ids.insert(stop_ids.end(), eos.begin(), eos.end());

  GenerationResult result;
  result.prompt_tokens = n_prompt;
  Sampler sampler(req.sampling);
  SAMPAN_CHECK(!(req.json_object && req.grammar), ErrorCode::kInvalidArgument,
               "JSON mode and a grammar (json_schema) were both requested; choose one");
  if (req.json_object) {
    sampler.set_constraint(std::make_unique<JsonConstraint>(TokenBytes::build(tokenizer), eos));
  } else if (req.grammar) {
    sampler.set_constraint(std::make_unique<GrammarConstraint>(
        req.grammar, TokenBytes::build(tokenizer), eos, "json_schema"));
  }

  // Keep the cached prefix shared with this prompt; at least the last prompt token is run so
  // its logits exist.
  int64_t keep = 0;
  if (req.reuse_prefix) {
    const std::vector<int32_t>& cached = lm.cached_ids();
    const int64_t limit = std::min<int64_t>(static_cast<int64_t>(cached.size()), n_prompt - 1);
    while (keep < limit && cached[static_cast<size_t>(keep)] == req.prompt[static_cast<size_t>(keep)]) ++keep;
  }
  lm.truncate(keep);
  result.cached_prompt_tokens = keep;

  auto t0 = Clock::now();
  Tensor logits = lm.forward(std::span<const int32_t>(req.prompt.data() + keep,
                                                      static_cast<size_t>(n_prompt - keep)),
                             false);
  auto t1 = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  std::vector<int32_t> seen = req.prompt;
  tok::StreamDecoder decoder(tokenizer);
  StopMatcher stops(req.stop);
  result.finish = FinishReason::kLength;
  for (int64_t step = 0; step < req.max_tokens; ++step) {
    const SampleResult s = sampler.sample(
        std::span<const float>(logits.data<float>(), static_cast<size_t>(vocab)), seen);
    if (std::find(stop_ids.begin(), stop_ids.end(), s.id) != stop_ids.end()) {
      result.finish = FinishReason::kStop;
      break;
    }
    result.tokens.push_back(s.id);
    seen.push_back(s.id);
    GenerationEvent ev;
    ev.token = s.id;
    ev.text = stops.push(decoder.push(s.id));
    ev.sample = s;
    result.text += ev.text;
    if (on_event) on_event(ev);
    if (stops.stopped()) {
      result.finish = FinishReason::kStop;
      result.stop_matched = stops.matched();
      break;
    }
    if (step + 1 == req.max_tokens || lm.n_past() + 1 >= lm.capacity()) break;
    logits = lm.forward(std::span<const int32_t>(&s.id, 1), false);
  }
  if (!stops.stopped()) {
    GenerationEvent tail;
    tail.text = stops.push(decoder.flush());
    tail.text += stops.flush();
    if (!tail.text.empty()) {
      result.text += tail.text;
      tail.token = -1;
      if (on_event) on_event(tail);
    }
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return result;
}

}  // namespace sampan::runtime
