#include "engine/models/rope_freqs.h"

#include <cmath>
#include <numbers>

#include "engine/core/error.h"

namespace sampan {

namespace {

// float32 pow rounded from the double result: this is the correctly rounded float32 value for
// all but astronomically rare inputs, i.e. what an exact float32 pow returns.
float pow_f32(float base, float exponent) {
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

// 1 / theta^(2i / d): torch.arange(0, d, 2) as float32, divided by d in float32, theta (a Python
// float) cast to float32 for pow, then float32 reciprocal.
std::vector<float> default_inv_freq(double theta, int64_t head_dim) {
  const auto base = static_cast<float>(theta);
  const auto d = static_cast<float>(head_dim);
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / d;
    inv[i] = 1.0f / pow_f32(base, exponent);
  }
  return inv;
}

// transformers' llama3 rule (Llama 3.1): wavelengths longer than old_ctx / low_freq_factor are
// divided by factor, those shorter than old_ctx / high_freq_factor kept, and the band between
// blended linearly in old_ctx / wavelength. Python scalars meet float32 tensors, so each scalar
// is rounded to float32 before the float32 operation; `s / t` on a tensor is computed by torch
// as reciprocal(t) * s.
void apply_llama3(const RopeScaling& rope, std::vector<float>* inv /* [head_dim / 2] */) {
  const double old_ctx = static_cast<double>(rope.original_max_position_embeddings);
  const auto low_wavelen = static_cast<float>(old_ctx / rope.low_freq_factor);
  const auto high_wavelen = static_cast<float>(old_ctx / rope.high_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const auto factor = static_cast<float>(rope.factor);
  const auto old_ctx_f = static_cast<float>(old_ctx);
  const auto low_f = static_cast<float>(rope.low_freq_factor);
  const auto band = static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);
  for (float& f : *inv) {
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const float smooth = ((1.0f / wavelen) * old_ctx_f - low_f) / band;
      const float a = (1.0f - smooth) * scaled / factor;
      const float b = smooth * scaled;
      f = a + b;
    } else {
      f = scaled;
    }
  }
}

}  // namespace

RopeFreqs compute_rope_freqs(const RopeScaling& rope, int64_t head_dim) {
  SAMPAN_CHECK(head_dim > 0 && head_dim % 2 == 0, ErrorCode::kInvalidArgument,
               "rope: head_dim {} must be positive and even", head_dim);
  SAMPAN_CHECK(rope.theta > 0, ErrorCode::kInvalidArgument, "rope: theta {} must be positive",
               rope.theta);
  RopeFreqs out;
  out.inv_freq = default_inv_freq(rope.theta, head_dim);
  switch (rope.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear: {
      SAMPAN_CHECK(rope.factor > 0, ErrorCode::kInvalidArgument,
                   "rope: linear factor {} must be positive", rope.factor);
      const auto factor = static_cast<float>(rope.factor);
      for (float& f : out.inv_freq) f /= factor;
      break;
    }
    case RopeType::kLlama3:
      SAMPAN_CHECK(rope.factor > 0 && rope.low_freq_factor > 0 &&
                       rope.high_freq_factor > rope.low_freq_factor &&
                       rope.original_max_position_embeddings > 0,
                   ErrorCode::kInvalidArgument,
                   "rope: llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                   "original_max_position_embeddings > 0");
      apply_llama3(rope, &out.inv_freq);
      break;
  }
  return out;
}

RopeFreqs compute_rope_freqs(const HfConfig& config) {
  return compute_rope_freqs(config.rope, config.head_dim);
}

}  // namespace sampan
