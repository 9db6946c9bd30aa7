#include "engine/runtime/sampling_limits.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/runtime/sampler.h"

namespace sampan::runtime {

void check_sampling_param(SamplingParam p, double value, const std::string& field) {
  const SamplingLimit l = sampling_limit(p);
  const bool ok = std::isfinite(value) && (l.lo_open ? value > l.lo : value >= l.lo) &&
                  value <= l.hi;
  if (ok) return;
  const std::string name = field.empty() ? std::string(l.name) : field;
  fail_field(ErrorCode::kInvalidArgument, name, "'{}' must be in {}{}, {}], got {}", name,
             l.lo_open ? "(" : "[", l.lo, l.hi, value);
}

void validate_sampling(const SamplingParams& p, std::string_view prefix) {
  const auto check = [&](SamplingParam which, double value) {
    check_sampling_param(which, value, std::string(prefix) + sampling_limit(which).name);
  };
  check(SamplingParam::kTemperature, p.temperature);
  check(SamplingParam::kTopK, p.top_k);
  check(SamplingParam::kTopP, p.top_p);
  check(SamplingParam::kMinP, p.min_p);
  check(SamplingParam::kRepetitionPenalty, p.repetition_penalty);
  check(SamplingParam::kPresencePenalty, p.presence_penalty);
  check(SamplingParam::kFrequencyPenalty, p.frequency_penalty);
  check(SamplingParam::kTopLogprobs, p.top_logprobs);
  const std::string bias_field = std::string(prefix) + "logit_bias";
  for (const auto& [id, bias] : p.logit_bias) {
    check_logit_bias_entry(id, bias, bias_field, fmt::format("{}[\"{}\"]", bias_field, id));
  }
}

void check_logit_bias_entry(int32_t id, double bias, const std::string& key_field,
                            const std::string& value_field) {
  if (id < 0) {
    fail_field(ErrorCode::kInvalidArgument, key_field, "'{}' key {} is not a token id",
               key_field, id);
  }
  check_sampling_param(SamplingParam::kLogitBias, bias, value_field);
}

void check_logit_bias_ids(const SamplingParams& p, int64_t vocab) {
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab) {
      fail_field(ErrorCode::kInvalidArgument, "logit_bias",
                 "'logit_bias' key {} is outside the vocabulary of {}", id, vocab);
    }
  }
}

}  // namespace sampan::runtime
