// attention_token_flags: one warp per token checks the indices the token will follow and finds
// the run of its sequence inside its tile (attention_common.cuh).
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kFlagWarps = 8;  // tokens per thread block

__global__ void __launch_bounds__(kFlagWarps * 32)
    token_flags_kernel(AttentionBatch b, PagedKv c, uint8_t* __restrict__ flags,  // [n_tokens]
                       FaultSink fault) {
  static_assert(kTileTokens == 64, "the run search holds a tile's sequence ids in 64 bits");
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kFlagWarps + (threadIdx.x >> 5);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kFlagWarps;
  for (int64_t t = first; t < b.n_tokens; t += stride) {
    const int64_t s = b.seq_ids[t], p = b.pos[t];
    uint8_t f = 0;
    if (s < 0 || s >= c.n_seqs) {
      f |= kTokenBadSeq;
    } else if (p < 0 || p / c.block_size >= c.max_blocks) {
      f |= kTokenBadPos;
    } else {
      const int32_t* row = c.block_tables + s * c.max_blocks;
      const int64_t lo = attention_first_key(p, b.sliding_window) / c.block_size;
      const int64_t hi = p / c.block_size;
      bool bad = false;
      for (int64_t i = lo + lane; i <= hi; i += 32) bad |= row[i] < 0 || row[i] >= c.n_blocks;
      if (__any_sync(0xffffffffu, bad)) f |= kTokenBadBlock;
    }
    if (f == 0) {
      f = kTokenValid;
    } else if (lane == 0) {
      report_fault(fault, f);
    }
    // The maximal run of tokens of sequence s around t inside t's tile, from a 64-bit mask of
    // the tile's tokens that belong to s.
    const int64_t t0 = t / kTileTokens * kTileTokens;
    const bool eq_lo = t0 + lane < b.n_tokens && b.seq_ids[t0 + lane] == s;
    const bool eq_hi = t0 + 32 + lane < b.n_tokens && b.seq_ids[t0 + 32 + lane] == s;
    const uint64_t eq = static_cast<uint64_t>(__ballot_sync(0xffffffffu, eq_lo)) |
                        static_cast<uint64_t>(__ballot_sync(0xffffffffu, eq_hi)) << 32;
    const int i = static_cast<int>(t - t0);
    const uint64_t gaps_above = ~eq & (~0ull << i);
    const uint64_t gaps_below = ~eq & ((1ull << i) - 1);
    const int end = gaps_above ? __ffsll(static_cast<long long>(gaps_above)) - 1 : 64;
    const int start = gaps_below ? 64 - __clzll(static_cast<long long>(gaps_below)) : 0;
    if (end - start >= kMinTiledRun) f |= kTokenTiled;
    if (lane == 0) flags[t] = f;
  }
}

}  // namespace

int attention_token_flags(const AttentionBatch& batch, const PagedKv& cache, uint8_t* flags,
                          FaultSink fault, cudaStream_t stream) {
  if (batch.n_tokens <= 0) return cudaSuccess;
  if (cache.block_size <= 0) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(min64(ceil_div(batch.n_tokens, kFlagWarps), 65535));
  token_flags_kernel<<<grid, kFlagWarps * 32, 0, stream>>>(batch, cache, flags, fault);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
