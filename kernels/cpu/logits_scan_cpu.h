// One-pass scans of a vocabulary's logits for the sampler (engine/runtime/sampler.cc): the
// checks and the maximum, the greedy argmax and a top-k candidate set, on 8-lane AVX2 vectors
// (the CPU baseline, so every ISA level gives the same answers). A scalar pass cost about 1 ns
// per logit each (~40 us for a 32,000 vocabulary; 160 for 128,000), per sequence and step.
#pragma once

#include <cstdint>
#include <vector>

namespace sampan::cpu {

struct LogitsScan {
  int64_t first_bad = -1;    // the first index holding NaN or +inf, -1 if none
  bool any_finite = false;   // some logit is finite
  float max = 0.0f;          // the largest logit (-inf if all are); meaningful when first_bad < 0
};

// x: [n], n >= 1.
LogitsScan scan_logits(int64_t n, const float* x);

// The lowest index of the largest value of x: [n], n >= 1, none of them NaN.
int64_t argmax_first(int64_t n, const float* x);

// Indices of x: [n] (no NaN) that contain the k best by (value descending, index ascending),
// k >= 1: every index whose value is >= the k-th largest value, and possibly more (at most
// about 4 k + 8 beyond them), in ascending order into `out` (replaced). The caller ranks them
// (nth_element) to get exactly the k best. Cost: one vector compare per 8 logits plus the
// candidates' handling.
void top_k_candidates(int64_t n, const float* x, int64_t k, std::vector<int32_t>& out);

// The indices i < n with x[i] >= t, ascending, into `out` (replaced). x: [n].
void indices_at_least(int64_t n, const float* x, float t, std::vector<int32_t>& out);

// mass[e] += w for every w = x[i] > 0 whose float exponent field is e (0..255), i < n: the
// total weight per power-of-two range, so that a caller can find from which power of two down
// the largest weights reach a given total without sorting them. x: [n] non-negative, finite.
void exponent_masses(int64_t n, const float* x, double mass[256]);

}  // namespace sampan::cpu
