// RoPE inverse frequencies for a parsed config, computed as Hugging Face transformers computes
// them (ROPE_INIT_FUNCTIONS / the models' default rope init), so a Sampan model rotates q and k by
// the same angles the reference model does.
//
// transformers builds inv_freq in float32 on the CPU; every step here is the same float32
// operation in the same order, so results match it to the last bit except where torch's
// vectorised pow (SLEEF, <= 1 ulp) rounds differently from the correctly rounded pow used here.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/loaders/hf_config.h"

namespace sampan {

struct RopeFreqs {
  std::vector<float> inv_freq;  // [head_dim / 2]: angle per position of channel pair i
  // Scale applied to cos and sin (transformers' attention_scaling); 1 for default, linear and
  // llama3.
  float attention_factor = 1.0f;
};

// Throws Error(kInvalidArgument) for an odd or non-positive head_dim or a non-positive theta.
RopeFreqs compute_rope_freqs(const RopeScaling& rope, int64_t head_dim);
RopeFreqs compute_rope_freqs(const HfConfig& config);

}  // namespace sampan
