// What the CUDA attention kernels (kv_write, attention_prefill, attention_decode) share with each
// other and with their launcher (engine/ops/attention_cuda.cc): the KV-cache formats, the paged
// cache, the step's batch, and the per-token flags that divide the batch between the tiled
// prefill kernel and the split-K decode kernel. Host and device code; no engine type.
//
// The formats and their byte layout are those of the CPU backend (kernels/cpu/attention_cpu.h and
// kernels/cpu/kv_quant.h, which say what every byte means); the launcher static_asserts that the
// sizes below agree with the CPU's, and the CUDA tests compare the bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/kv_format.h"
#include "kernels/cuda/fault.cuh"

namespace sampan::cuda {

// The formats of kernels/common/kv_format.h, one definition for both backends.
using KvFormat = sampan::KvDtype;
using sampan::kKvI4Group;
using sampan::kv_i4_group;
using sampan::kv_head_bytes;

// One layer's paged K/V pools, device memory: [n_blocks, block_size, n_kv_heads records].
// Position j of sequence s is row j % block_size of block block_tables[s * max_blocks +
// j / block_size].
struct PagedKv {
  void* k = nullptr;
  void* v = nullptr;
  KvFormat format = KvFormat::kF32;
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  int64_t n_seqs = 0;
  int64_t max_blocks = 0;
};

// The step: n_tokens query tokens, token t of sequence seq_ids[t] at position pos[t] (device
// memory, [n_tokens] each). Query head h reads KV head h / (n_heads / n_kv_heads).
struct AttentionBatch {
  int64_t n_tokens = 0;
  const int32_t* pos = nullptr;
  const int32_t* seq_ids = nullptr;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: none; else keys p - window + 1 .. p
};

__host__ __device__ inline int64_t attention_first_key(int64_t pos, int64_t sliding_window) {
  return sliding_window > 0 && pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
}

// Per-token flags, written by attention_token_flags and read by both attention kernels.
constexpr uint8_t kTokenValid = 1;     // every index the token follows is inside its table/pool
constexpr uint8_t kTokenTiled = 2;     // attention_prefill owns the token, else attention_decode
constexpr uint8_t kTokenBadSeq = 4;    // seq_ids[t] outside [0, n_seqs)
constexpr uint8_t kTokenBadPos = 8;    // pos[t] < 0 or past the max_blocks * block_size rows
constexpr uint8_t kTokenBadBlock = 16;  // a block id it needs is outside [0, n_blocks)

// The tiled kernel takes the batch in tiles of kTileTokens consecutive tokens. Inside a tile, a
// run of at least kMinTiledRun consecutive tokens of one sequence (a prefill chunk, or a piece
// of one) is tiled: its K/V is read once for all its tokens. Shorter runs (decode tokens, the
// stray ends of a chunk that straddles a tile boundary) go to the split-K kernel, which reads
// the K/V once per token but spreads a long sequence over many thread blocks. Every token's
// result is the same function of its own (sequence, position) either way, as on the CPU; the
// split only decides the speed. A tile holds at most kTileTokens / kMinTiledRun tiled runs,
// which its thread blocks take one after another.
constexpr int64_t kTileTokens = 64;
constexpr int64_t kMinTiledRun = 16;

// flags: [n_tokens] bytes (device). Validates every token's indices the way the CPU op's
// check_paged_indices does (sequence id, position within the table, every block id from its
// first key to its position) and classifies it (kTokenTiled). A token with bad indices is also
// reported to `fault` with its kTokenBad* bits as the reason. Returns the cudaError_t of the
// launch.
int attention_token_flags(const AttentionBatch& batch, const PagedKv& cache, uint8_t* flags,
                          FaultSink fault, cudaStream_t stream);

}  // namespace sampan::cuda
