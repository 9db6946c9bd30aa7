// Token sampling from logits, and stop-string detection over streamed text.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/sampling_limits.h"

namespace sampan::runtime {

// Order of operations in Sampler::sample():
//   1. logprobs (chosen token and top alternatives) from log_softmax of the raw logits, before
//      anything below, as the OpenAI API reports them;
//   2. penalties on the distinct ids of `seen`: repetition (HF/CTRL), then presence, then
//      frequency (times the id's count);
//   3. temperature 0 (or below 1e-5, where logits / temperature would lose all meaning):
//      greedy argmax of the penalised logits, lowest id on ties; otherwise logits / temperature;
//   4. filters, in this order: top_k, top_p, min_p. top_k and top_p rank tokens by (logit
//      descending, id ascending), so ties are cut deterministically: top_k keeps exactly k ids,
//      top_p the shortest prefix of that ranking whose probability (renormalised over what top_k
//      kept) reaches top_p, always at least one id; min_p keeps p >= min_p * p_max;
//   5. a draw from the kept ids, renormalised, with xoshiro256** seeded through splitmix64
//      (from `seed`, else from std::random_device); an id whose probability is below e^-86.6
//      of the most likely one's (~2.5e-38) is never drawn (its weight is 0, not a denormal).
// The passes over the whole vocabulary (checks, max, argmax, log-sum-exp, weights, top-k
// candidates) are vector kernels (kernels/cpu/logits_scan_cpu.h, softmax_cpu.h): 32,000 logits
// greedy in ~0.05 ms (bench/bench_sampler.cc).
struct SamplingParams {
  float temperature = 1.0f;        // 0: greedy
  int32_t top_k = 0;               // 0: off
  float top_p = 1.0f;              // 1: off
  float min_p = 0.0f;              // 0: off; keeps tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f; // HF/CTRL style: logit / p if > 0 else logit * p, on seen ids
  float presence_penalty = 0.0f;   // OpenAI: minus this once per seen id, in [-2, 2]
  float frequency_penalty = 0.0f;  // OpenAI: minus this times the count of the id, in [-2, 2]
  std::optional<uint64_t> seed;    // same seed + same logits sequence -> same tokens
  int32_t top_logprobs = 0;        // how many alternatives to report (0..kMaxTopLogprobs)
  // Whether the caller reads SampleResult::logprob. False skips its log-sum-exp pass (the CPU
  // Sampler then reports NaN) and lets an engine on a GPU sample there
  // (runtime/device_sampler.h), which computes none.
  bool logprobs = true;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // log-softmax of the raw logits (before penalties and temperature)
};

struct SampleResult {
  int32_t id = 0;
  float logprob = 0.0f;  // of the chosen token, same definition; NaN unless params.logprobs or
                         // top_logprobs asked for logprobs
  std::vector<TokenLogprob> top;        // top_logprobs alternatives, best first
};

class Sampler {
 public:
  // Throws Error(kInvalidArgument) with field() naming the parameter when it is outside its
  // range in sampling_limits.h (validate_sampling).
  explicit Sampler(const SamplingParams& params);

  // logits: [vocab] (not modified). seen: ids the penalties apply to (prompt + generated, as
  // the caller decides). Throws Error(kInvalidArgument) on an empty vocab, a NaN or +inf logit,
  // all logits -inf, or a seen id outside [0, vocab). top holds min(top_logprobs, vocab) ids.
  // O(vocab) plus O(k log k) for the ids top_k keeps; top_p alone ranks only the ids of the
  // weight bucket where its total crosses top_p (1/256 of a power of two); no full sort.
  SampleResult sample(std::span<const float> logits, std::span<const int32_t> seen);

  // The distribution sample() would draw from for these inputs (steps 2-4 above; no draw, the
  // RNG is untouched): the kept ids ascending with their renormalised log-probabilities.
  // Greedy gives one id with log-probability 0. For tests and debugging.
  std::vector<TokenLogprob> distribution(std::span<const float> logits,
                                         std::span<const int32_t> seen);

 private:
  // Throws on bad inputs (sample()'s contract); returns the largest logit.
  float check_inputs(std::span<const float> logits, std::span<const int32_t> seen) const;
  void apply_penalties(std::span<const float> logits, std::span<const int32_t> seen);
  void select_kept();
  uint64_t next_u64();

  SamplingParams params_;
  uint64_t rng_state_[4];
  std::vector<float> work_;            // [vocab] penalised, then temperature-scaled logits
  std::vector<int32_t> order_;         // [vocab] ids; the first n_kept_ may be drawn
  std::vector<float> weights_;         // [vocab] top_p scratch: e^(scaled logit - max)
  bool weights_valid_ = false;         // weights_ holds this call's weights (top_p without top_k)
  std::vector<int32_t> seen_sorted_;   // [seen] scratch for counting repeats
  size_t n_kept_ = 0;
  bool all_kept_ = false;              // no filter removed anything: order_ is not built
  float max_scaled_ = 0.0f;            // max of work_ after scaling
};

// Detects stop strings in streamed text, also when split across tokens: push() returns the
// text that is safe to emit now (never a prefix of a possible stop), and sets stopped() when a
// stop string completes (the stop string itself and everything after it are not emitted).
// When several stops match, the one that completes first wins (then the one starting first),
// so the result does not depend on how the text was split. After stopped(), push() and
// flush() return "". Throws Error(kInvalidArgument) on an empty stop string.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  std::string push(std::string_view delta);
  std::string flush();  // held-back text when generation ends for another reason
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace sampan::runtime
