// Sampling on the GPU for the serving Engine: the rows of a step's logits that stay on the
// device, one id per row back to the host (4 bytes a row instead of vocab x 4: 0.5 MB per row
// of a 128k vocabulary). The kernel is kernels/cuda/sampling.cuh, which says how its draws
// relate to the CPU Sampler's: greedy is identical; a seeded draw is reproducible on the GPU
// but not the CPU's draw, because the random streams differ.
//
// What it does not do, and the Engine keeps on the CPU Sampler: penalties (repetition,
// presence, frequency), logit_bias and logprobs (device_sampling_eligible()).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "engine/runtime/sampler.h"

namespace sampan::runtime {

// True when `p` can be sampled on the GPU: no penalty, no logprob asked for.
bool device_sampling_eligible(const SamplingParams& p);

// One row of a step: where its logits are and what to draw.
struct DeviceSampleRow {
  SamplingParams params;  // temperature, top_k, top_p, min_p are used
  uint64_t seed = 0;      // the request's seed (or one drawn for it at submit)
  uint64_t step = 0;      // the request's generated-token index: the draw's counter
};

class DeviceSampler {
 public:
  // Throws Error(kUnsupported) in a build without CUDA, kNotFound without the device.
  explicit DeviceSampler(Device device);
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  // logits: [rows.size(), vocab] f32 on the sampler's device, rows contiguous and complete (the
  // executor's output after run() returned). Returns one id per row, or -1 for a row holding a
  // NaN or +inf or only -inf (the caller reports it as the CPU Sampler would). Waits for the
  // result; a CUDA error throws Error.
  std::vector<int32_t> sample(const Tensor& logits, std::span<const DeviceSampleRow> rows);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::runtime
