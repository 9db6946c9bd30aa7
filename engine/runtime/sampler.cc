#include "engine/runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "engine/core/error.h"
#include "engine/runtime/sampling_limits.h"
#include "kernels/cpu/logits_scan_cpu.h"
#include "kernels/cpu/softmax_cpu.h"

namespace sampan::runtime {

namespace {

// Below this, logits / temperature overflows or amplifies rounding noise into the ranking;
// treating it as greedy is what such a temperature asks for anyway.
constexpr float kGreedyTemperature = 1e-5f;
// top_p with top_k sorts the ranking lazily in chunks growing from this size, so a peaked
// distribution costs O(k) and a flat one O(k log k) at worst.
constexpr size_t kFirstNucleusChunk = 64;

uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// The ranking every filter and the reported alternatives use: larger logit first, lower id on
// ties, so results never depend on the order a selection algorithm visits equal values.
struct Ranks {
  const float* v;  // [vocab]
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

}  // namespace

double raw_log_normalizer(std::span<const float> logits, float raw_max) {
  const double sum = cpu::exp_shifted(static_cast<int64_t>(logits.size()), logits.data(), raw_max,
                                      nullptr);
  return static_cast<double>(raw_max) + std::log(sum);
}

std::vector<TokenLogprob> raw_top_logprobs(std::span<const float> logits, double log_z,
                                           size_t n) {
  const size_t vocab = logits.size();
  const size_t n_top = std::min(n, vocab);
  std::vector<TokenLogprob> top;
  if (n_top == 0) return top;
  // The vector kernel's candidates (every id at or above the n-th largest logit, a few more),
  // ranked: one compare per 8 logits instead of a scalar ranked insert per logit (2 ns a logit:
  // 70 ms for the prompt logprobs of 1,000 tokens over 32,000 ids).
  std::vector<int32_t> best;
  cpu::top_k_candidates(static_cast<int64_t>(vocab), logits.data(), static_cast<int64_t>(n_top),
                        best);
  const Ranks ranks{logits.data()};
  std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(n_top), best.end(),
                    ranks);
  best.resize(n_top);
  top.reserve(n_top);
  for (const int32_t id : best) {
    top.push_back({id, static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) -
                                          log_z)});
  }
  return top;
}

SampleResult score_token(std::span<const float> logits, int32_t id, size_t n_top) {
  SAMPAN_CHECK(!logits.empty(), ErrorCode::kInvalidArgument, "prompt logprobs: logits are empty");
  SAMPAN_CHECK(id >= 0 && static_cast<size_t>(id) < logits.size(), ErrorCode::kInvalidArgument,
               "prompt logprobs: token id {} is outside the vocab of {}", id, logits.size());
  const cpu::LogitsScan scan = cpu::scan_logits(static_cast<int64_t>(logits.size()), logits.data());
  if (scan.first_bad >= 0) {
    fail(ErrorCode::kInvalidArgument, "prompt logprobs: logits[{}] is {}", scan.first_bad,
         logits[static_cast<size_t>(scan.first_bad)]);
  }
  SAMPAN_CHECK(scan.any_finite, ErrorCode::kInvalidArgument,
               "prompt logprobs: every logit is -inf");
  const double log_z = raw_log_normalizer(logits, scan.max);
  SampleResult r;
  r.id = id;
  r.logprob =
      static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_z);
  r.top = raw_top_logprobs(logits, log_z, n_top);
  const float mine = logits[static_cast<size_t>(id)];
  r.rank = 1 + static_cast<int32_t>(std::count_if(logits.begin(), logits.end(),
                                                   [mine](float x) { return x > mine; }));
  return r;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  validate_sampling(params);

  uint64_t seed = 0;
  if (params.seed) {
    seed = *params.seed;
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
  }
  for (uint64_t& s : rng_state_) s = splitmix64(&seed);
}

uint64_t Sampler::next_u64() {
  uint64_t* s = rng_state_;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

float Sampler::check_inputs(std::span<const float> logits, std::span<const int32_t> seen) const {
  SAMPAN_CHECK(!logits.empty(), ErrorCode::kInvalidArgument, "sampling: logits are empty");
  SAMPAN_CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
               ErrorCode::kInvalidArgument, "sampling: vocab of {} does not fit int32 ids",
               logits.size());
  const cpu::LogitsScan scan = cpu::scan_logits(static_cast<int64_t>(logits.size()), logits.data());
  if (scan.first_bad >= 0) {
    fail(ErrorCode::kInvalidArgument, "sampling: logits[{}] is {}", scan.first_bad,
         logits[static_cast<size_t>(scan.first_bad)]);
  }
  SAMPAN_CHECK(scan.any_finite, ErrorCode::kInvalidArgument, "sampling: every logit is -inf");
  const auto vocab = static_cast<int64_t>(logits.size());
  for (const int32_t id : seen) {
    SAMPAN_CHECK(id >= 0 && id < vocab, ErrorCode::kInvalidArgument,
                 "sampling: seen id {} is outside the vocab of {}", id, vocab);
  }
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || id >= vocab) {
      fail_field(ErrorCode::kInvalidArgument, "logit_bias",
                 "sampling: logit_bias id {} is outside the vocab of {}", id, vocab);
    }
  }
  return scan.max;
}

void Sampler::apply_penalties(std::span<const float> logits, std::span<const int32_t> seen) {
  work_.assign(logits.begin(), logits.end());
  // check_inputs checked the ids. A bias never makes a logit NaN or +inf: |bias| <= 100 and
  // the logits are finite or -inf (an id at -inf stays there).
  for (const auto& [id, bias] : params_.logit_bias) work_[static_cast<size_t>(id)] += bias;
  const float rep = params_.repetition_penalty;
  const float presence = params_.presence_penalty;
  const float frequency = params_.frequency_penalty;
  if (!seen.empty() && (rep != 1.0f || presence != 0.0f || frequency != 0.0f)) {
    // Sorting groups repeats so each distinct id is penalised once, with its count at hand.
    seen_sorted_.assign(seen.begin(), seen.end());
    std::sort(seen_sorted_.begin(), seen_sorted_.end());
    for (size_t i = 0; i < seen_sorted_.size();) {
      const int32_t id = seen_sorted_[i];
      size_t j = i;
      while (j < seen_sorted_.size() && seen_sorted_[j] == id) ++j;
      float& l = work_[static_cast<size_t>(id)];
      if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
      l -= presence;
      l -= frequency * static_cast<float>(j - i);
      i = j;
    }
  }
  if (constraint_) constraint_->mask(work_);
}

// Scales work_ by the temperature and leaves the kept ids in order_[0, n_kept_) (or sets
// all_kept_). Greedy keeps the single argmax.
void Sampler::select_kept() {
  const size_t vocab = work_.size();
  const Ranks ranks{work_.data()};
  weights_valid_ = false;
  if (params_.temperature < kGreedyTemperature) {
    const auto best =
        static_cast<int32_t>(cpu::argmax_first(static_cast<int64_t>(vocab), work_.data()));
    order_.assign(1, best);
    n_kept_ = 1;
    all_kept_ = false;
    max_scaled_ = work_[static_cast<size_t>(best)];
    return;
  }
  if (params_.temperature != 1.0f) {
    for (float& l : work_) l /= params_.temperature;
  }
  max_scaled_ =
      work_[static_cast<size_t>(cpu::argmax_first(static_cast<int64_t>(vocab), work_.data()))];
  const float max = max_scaled_;

  const bool top_k_on = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab;
  const bool top_p_on = params_.top_p < 1.0f;
  const bool min_p_on = params_.min_p > 0.0f;
  all_kept_ = !top_k_on && !top_p_on && !min_p_on;
  if (all_kept_) return;

  size_t n = vocab;
  size_t sorted = 0;  // order_[0, sorted) is ranked and holds the best `sorted` ids
  if (top_k_on) {
    // The candidates (a superset of the k best, one vector pass) are ranked instead of the
    // whole vocabulary.
    n = static_cast<size_t>(params_.top_k);
    cpu::top_k_candidates(static_cast<int64_t>(vocab), work_.data(), params_.top_k, order_);
    std::nth_element(order_.begin(), order_.begin() + static_cast<ptrdiff_t>(n), order_.end(),
                     ranks);
    std::sort(order_.begin(), order_.begin() + static_cast<ptrdiff_t>(n), ranks);
    sorted = n;
  }

  if (top_p_on && !top_k_on) {
    // The nucleus without ranking the whole vocabulary: every weight e^(l - max) (one vector
    // pass), their totals per power of two, and from the top down the power of two 2^e whose
    // weights and everything above reach top_p of the total. The ids above 2^(e + 1) are kept
    // whole; those of [2^e, 2^(e + 1)) are split the same way by the top 8 bits of their
    // mantissa, and only the sub-bucket where the total crosses top_p is ranked (then the next
    // ones, should rounding leave the total short). Weights are non-decreasing in the logit,
    // so every id of a higher (sub-)bucket ranks above every id of a lower one: the kept set is
    // the ranking's shortest prefix as the contract says, its order is not. A near-flat
    // distribution (most of the vocabulary in the nucleus) was a sort of the whole nucleus:
    // bench_sampler "top-p 0.9, flat", 32,000 / 128,256 logits, 3.8-4.0 / 16.4-17.1 ms ->
    // 0.48-0.62 / 2.0-2.6 ms per call (with the draw taking these weights instead of a scalar
    // exp per kept id).
    weights_.resize(vocab);
    const double z =
        cpu::exp_shifted(static_cast<int64_t>(vocab), work_.data(), max, weights_.data());
    weights_valid_ = true;
    const double target = static_cast<double>(params_.top_p) * z;
    double mass[256] = {};
    cpu::exponent_masses(static_cast<int64_t>(vocab), weights_.data(), mass);
    int e = 255;
    double cum = 0.0;
    for (; e > 1; --e) {
      cum += mass[e];
      if (cum >= target) break;
    }
    const auto weight_bits = [&](int32_t id) {
      return std::bit_cast<uint32_t>(weights_[static_cast<size_t>(id)]);
    };
    cpu::indices_at_least(static_cast<int64_t>(vocab), weights_.data(),
                          std::bit_cast<float>(static_cast<uint32_t>(e) << 23), order_);
    // [begin, cls): the classes above e; [cls, end): class e.
    const auto cls = std::partition(order_.begin(), order_.end(), [&](int32_t id) {
      return (weight_bits(id) >> 23) > static_cast<uint32_t>(e);
    });
    constexpr int kSubShift = 23 - 8;
    const auto sub_of = [&](int32_t id) {
      return static_cast<int>((weight_bits(id) >> kSubShift) & 255);
    };
    double sub[256] = {};
    for (auto it = cls; it != order_.end(); ++it) {
      sub[sub_of(*it)] += weights_[static_cast<size_t>(*it)];
    }
    double c = cum - mass[e];  // the mass above class e
    int b = 255;
    for (; b > 0; --b) {
      if (c + sub[b] >= target) break;
      c += sub[b];
    }
    // [cls, first): sub-buckets above b, kept whole; [first, end): b and below, ranked lazily.
    auto first = std::partition(cls, order_.end(), [&](int32_t id) { return sub_of(id) > b; });
    n = order_.size();  // all of them, should rounding never let the total reach the target
    for (auto lo = first; lo != order_.end(); b = -1) {
      // Bucket b first; then (rarely: only where the bucket totals rounded differently from
      // the ranked sum) everything below it at once.
      const auto hi = b >= 0 ? std::partition(lo, order_.end(),
                                              [&](int32_t id) { return sub_of(id) == b; })
                             : order_.end();
      std::sort(lo, hi, ranks);
      auto it = lo;
      for (; it != hi; ++it) {
        c += weights_[static_cast<size_t>(*it)];
        if (c >= target) break;
      }
      if (it != hi) {
        n = static_cast<size_t>(it - order_.begin()) + 1;
        break;
      }
      lo = hi;
    }
    sorted = 0;  // kept, but not in ranked order
  } else if (!top_k_on) {
    order_.resize(vocab);
    std::iota(order_.begin(), order_.end(), 0);
  }
  if (top_p_on && top_k_on) {
    double z = 0.0;
    for (size_t i = 0; i < n; ++i) {
      z += std::exp(work_[static_cast<size_t>(order_[i])] - max);
    }
    const double target = static_cast<double>(params_.top_p) * z;
    double cum = 0.0;
    size_t i = 0;
    for (;;) {
      if (i == sorted) {
        const size_t end = std::min(n, sorted + std::max(kFirstNucleusChunk, sorted));
        const auto first = order_.begin() + static_cast<ptrdiff_t>(sorted);
        const auto last = order_.begin() + static_cast<ptrdiff_t>(end);
        if (end < n) {
          std::nth_element(first, last, order_.begin() + static_cast<ptrdiff_t>(n), ranks);
        }
        std::sort(first, last, ranks);
        sorted = end;
      }
      cum += std::exp(work_[static_cast<size_t>(order_[i])] - max);
      ++i;
      if (cum >= target || i == n) break;
    }
    n = i;
  }

  if (min_p_on) {
    const float min_p = params_.min_p;
    const auto keep = [&](int32_t id) {
      return std::exp(work_[static_cast<size_t>(id)] - max) >= min_p;
    };
    if (sorted >= n) {
      // Ranked: the kept ids are a prefix, and the first (the max) always passes.
      size_t i = 1;
      while (i < n && keep(order_[i])) ++i;
      n = i;
    } else {
      const auto end = std::stable_partition(
          order_.begin(), order_.begin() + static_cast<ptrdiff_t>(n), keep);
      n = static_cast<size_t>(end - order_.begin());
    }
  }
  n_kept_ = n;
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const int32_t> seen) {
  const float raw_max = check_inputs(logits, seen);
  const size_t vocab = logits.size();

  // Raw log-softmax only where a caller reads it (a third of a greedy call over 32,000 logits
  // otherwise).
  const bool want_logprobs = params_.logprobs || params_.top_logprobs > 0;
  const double log_z = want_logprobs ? raw_log_normalizer(logits, raw_max)
                                     : std::numeric_limits<double>::quiet_NaN();
  const auto raw_logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_z);
  };

  SampleResult result;
  result.top = raw_top_logprobs(logits, log_z, static_cast<size_t>(params_.top_logprobs));

  apply_penalties(logits, seen);
  select_kept();

  int32_t chosen = -1;
  if (!all_kept_ && n_kept_ == 1) {
    chosen = order_[0];
  } else {
    const size_t n = all_kept_ ? vocab : n_kept_;
    const auto id_at = [&](size_t i) {
      return all_kept_ ? static_cast<int32_t>(i) : order_[i];
    };
    // Weights overwrite the scaled logits in place; work_ is rebuilt on the next call. Weights
    // below e^-86.6 of the largest are 0 either way (cpu::exp_shifted: no denormals).
    double total = 0.0;
    if (all_kept_) {
      total = cpu::exp_shifted(static_cast<int64_t>(n), work_.data(), max_scaled_, work_.data());
    } else if (weights_valid_) {  // the nucleus's weights, already computed
      for (size_t i = 0; i < n; ++i) {
        const auto id = static_cast<size_t>(id_at(i));
        work_[id] = weights_[id];
        total += work_[id];
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        float& w = work_[static_cast<size_t>(id_at(i))];
        const float v = w - max_scaled_;
        w = v >= -86.6f ? std::exp(v) : 0.0f;
        total += w;
      }
    }
    // 53 random bits: a uniform double in [0, 1).
    const double u = static_cast<double>(next_u64() >> 11) * 0x1.0p-53 * total;
    double acc = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const float w = work_[static_cast<size_t>(id_at(i))];
      if (w <= 0.0f) continue;
      chosen = id_at(i);  // also the fallback if rounding leaves u just past the last sum
      acc += w;
      if (u < acc) break;
    }
  }
  result.id = chosen;
  result.logprob = raw_logprob(chosen);
  if (constraint_) constraint_->accept(chosen);
  return result;
}

std::vector<TokenLogprob> Sampler::distribution(std::span<const float> logits,
                                                std::span<const int32_t> seen) {
  check_inputs(logits, seen);
  apply_penalties(logits, seen);
  select_kept();
  std::vector<TokenLogprob> out;
  if (!all_kept_ && n_kept_ == 1) {
    out.push_back({order_[0], 0.0f});
    return out;
  }
  if (all_kept_) {
    out.resize(work_.size());
    for (size_t i = 0; i < work_.size(); ++i) out[i].id = static_cast<int32_t>(i);
  } else {
    out.resize(n_kept_);
    for (size_t i = 0; i < n_kept_; ++i) out[i].id = order_[i];
    std::sort(out.begin(), out.end(),
              [](const TokenLogprob& a, const TokenLogprob& b) { return a.id < b.id; });
  }
  double z = 0.0;
  for (const TokenLogprob& t : out) z += std::exp(work_[static_cast<size_t>(t.id)] - max_scaled_);
  const double log_z = std::log(z);
  for (TokenLogprob& t : out) {
    t.logprob = static_cast<float>(
        static_cast<double>(work_[static_cast<size_t>(t.id)] - max_scaled_) - log_z);
  }
  return out;
}

// ---- StopMatcher ---------------------------------------------------------------------------

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    SAMPAN_CHECK(!stops_[i].empty(), ErrorCode::kInvalidArgument,
                 "stop: stop string {} is empty", i);
  }
}

std::string StopMatcher::push(std::string_view delta) {
  if (stopped_) return {};
  pending_.append(delta);
  const std::string_view text = pending_;

  // The stop that completes first; among those, the one that starts first.
  size_t best_pos = std::string_view::npos;
  size_t best_end = std::string_view::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stops_) {
    const size_t pos = text.find(stop);
    if (pos == std::string_view::npos) continue;
    const size_t end = pos + stop.size();
    if (best == nullptr || end < best_end || (end == best_end && pos < best_pos)) {
      best_pos = pos;
      best_end = end;
      best = &stop;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    matched_ = *best;
    std::string out(text.substr(0, best_pos));
    pending_.clear();
    return out;
  }

  // Hold back the longest tail that could still grow into a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(stop.size() - 1, text.size()); k > hold; --k) {
      if (text.substr(text.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  std::string out(text.substr(0, text.size() - hold));
  pending_.erase(0, text.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace sampan::runtime
