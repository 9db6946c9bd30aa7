// The one definition of every sampling parameter's valid range. The Sampler, the server's request
// parsers (OpenAI, KServe REST and gRPC, Generate) and the C API's setters all check through it,
// so a value is accepted or refused alike whichever way it comes in, and the refusal names the
// field (Error::field()) instead of leaving callers to find it in the message.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace sampan::runtime {

struct SamplingParams;  // sampler.h

enum class SamplingParam {
  kTemperature,
  kTopK,
  kTopP,
  kMinP,
  kRepetitionPenalty,
  kPresencePenalty,
  kFrequencyPenalty,
  kTopLogprobs,
  kLogitBias,  // each bias value of SamplingParams::logit_bias
};

// [lo, hi], or (lo, hi] when lo_open. NaN and infinities are always outside.
struct SamplingLimit {
  const char* name;  // the field's name in every API ("top_p")
  double lo;
  double hi;
  bool lo_open;
};

// The most alternatives a token's logprobs may list (OpenAI's limit).
inline constexpr int32_t kMaxTopLogprobs = 20;
// Above these the value means nothing more (logits / 1e6 are all ~0: uniform; a penalty of 1e6
// already removes a token), and far larger ones only come from clients sending garbage.
inline constexpr double kMaxTemperature = 1e6;
inline constexpr double kMaxRepetitionPenalty = 1e6;

constexpr SamplingLimit sampling_limit(SamplingParam p) {
  switch (p) {
    case SamplingParam::kTemperature: return {"temperature", 0, kMaxTemperature, false};
    case SamplingParam::kTopK:
      return {"top_k", 0, std::numeric_limits<int32_t>::max(), false};  // 0: off
    case SamplingParam::kTopP: return {"top_p", 0, 1, true};
    case SamplingParam::kMinP: return {"min_p", 0, 1, false};
    case SamplingParam::kRepetitionPenalty:
      return {"repetition_penalty", 0, kMaxRepetitionPenalty, true};
    case SamplingParam::kPresencePenalty: return {"presence_penalty", -2, 2, false};
    case SamplingParam::kFrequencyPenalty: return {"frequency_penalty", -2, 2, false};
    case SamplingParam::kTopLogprobs: return {"top_logprobs", 0, kMaxTopLogprobs, false};
    case SamplingParam::kLogitBias: return {"logit_bias", -100, 100, false};
  }
  return {"?", 0, 0, false};
}

// Throws Error(kInvalidArgument, field) "'<field>' must be in [lo, hi], got <value>" when
// `value` is outside sampling_limit(p). `field` is the name the caller's request used (a prefix,
// or another name such as the completions API's "logprobs"); empty means sampling_limit(p).name.
// Callers pass the value as received (before narrowing to float), so the check is exact.
void check_sampling_param(SamplingParam p, double value, const std::string& field = "");

// check_sampling_param for every parameter of `params`, in the enum's order, each field named
// `field_prefix` + its name (a logit_bias entry: `field_prefix` + logit_bias["<id>"]); a
// negative logit_bias id is refused naming `field_prefix` + "logit_bias".
void validate_sampling(const SamplingParams& params, std::string_view field_prefix = "");

// One logit_bias entry as every front end checks it: Error(kInvalidArgument, key_field) for a
// negative id, check_sampling_param(kLogitBias, bias, value_field) for the bias.
void check_logit_bias_entry(int32_t id, double bias, const std::string& key_field,
                            const std::string& value_field);

// Throws Error(kInvalidArgument, "logit_bias") when a logit_bias id of `params` is not below
// `vocab`: what a request's submission checks, so that a bad id is refused before generation
// starts rather than at its first sampled token.
void check_logit_bias_ids(const SamplingParams& params, int64_t vocab);

}  // namespace sampan::runtime
