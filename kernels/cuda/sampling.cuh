// Token sampling on the GPU over [batch, vocab] f32 logits: greedy argmax, temperature, top_k,
// top_p, min_p, one id per row, so that only the sampled ids need to come back to the host.
//
// Same order of operations and tie rules as the CPU sampler (engine/runtime/sampler.h, steps 3
// to 5): temperature below 1e-5 is greedy (argmax, lowest id on ties); otherwise logits are
// divided by the temperature, then top_k, top_p (over what top_k kept) and min_p filter, ranking
// tokens by (scaled logit descending, id ascending), so top_k keeps exactly k ids and top_p the
// shortest prefix of the ranking that reaches top_p of the mass, at least one id. Penalties
// (repetition, presence, frequency) are not applied here: a caller with penalties samples on the
// CPU.
//
// The random stream differs from the CPU's: the draw uses Philox4x32-10 keyed by the row's seed
// with the row's step as counter (counter-based: no state to carry between steps, and a request
// gets the same tokens whatever batch it shares), and walks the kept ids in id order where the
// CPU walks them in ranking order. So a seeded request gives the same tokens run to run on the
// GPU, but not the tokens it gets on the CPU. Greedy is identical on both.
//
// Cost: one block per row and about 110 passes over the row (bit-serial selection of the top_k
// and top_p thresholds, with deterministic tree reductions: the same inputs give the same ids),
// from L2 for vocabularies up to a few 100k. A first version, correct before fast.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

struct SamplingRowParams {
  float temperature = 1.0f;  // < 1e-5: greedy
  int32_t top_k = 0;         // 0 (or >= vocab): off
  float top_p = 1.0f;        // in (0, 1]; 1: off
  float min_p = 0.0f;        // in [0, 1]; 0: off
  uint64_t seed = 0;         // the request's seed
  uint64_t step = 0;         // the request's generated-token index: the Philox counter
};

// Philox4x32-10 (Salmon et al., SC'11) of counter (step, 0) under key seed, as 53 random bits in
// a double in [0, 1). Host and device, so tests can reproduce a draw.
__host__ __device__ inline double philox_uniform(uint64_t seed, uint64_t step) {
  uint32_t c0 = static_cast<uint32_t>(step), c1 = static_cast<uint32_t>(step >> 32), c2 = 0,
           c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const uint64_t bits = (static_cast<uint64_t>(c0) << 32) | c1;
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

// logits: [batch, vocab] f32, row stride ld (>= vocab), not modified. params: [batch] device
// array. ids: [batch] i32 device output: the sampled id, or -1 for a row that holds a NaN or
// +inf or only -inf (the caller reports it; the CPU sampler's check_inputs rule). vocab >= 1.
// Queued on `stream`; no allocation, no synchronisation (capturable in a CUDA graph). Returns
// the cudaError_t of the launch.
int sample_tokens(const float* logits, int64_t batch, int64_t vocab, int64_t ld,
                  const SamplingRowParams* params, int32_t* ids, cudaStream_t stream);

}  // namespace sampan::cuda
