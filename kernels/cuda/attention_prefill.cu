// attention_prefill: one thread block per (tile of kTileTokens tokens, query head). The tile's
// query rows stay in shared memory while the K/V of the run's sequence stream through in tiles
// of kKeyTile keys (attention_tile.cuh); each warp owns 8 of the 64 rows.
#include "kernels/cuda/attention_prefill.cuh"
#include "kernels/cuda/attention_tile.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

using attn::kKeyTile;
using attn::kMaxRows;
using attn::kThreads;
using attn::kWarps;

constexpr int kRowsPerWarp = kMaxRows / kWarps;
static_assert(kMaxRows == kTileTokens, "a thread block holds one tile's tokens");

struct PrefillArgs {
  AttentionBatch b;
  PagedKv c;
  const float* q;  // [n_tokens, n_heads * head_dim] row stride ldq
  int64_t ldq;
  const uint8_t* flags;  // [n_tokens]
  float* out;            // [n_tokens, n_heads * head_dim] row stride ldo
  int64_t ldo;
  bool word;
};

template <KvFormat F, int kD>
__global__ void __launch_bounds__(kThreads) attention_prefill_kernel(PrefillArgs a) {
  constexpr int kS = attn::key_stride(kD);
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);  // [kMaxRows, kD]
  float* k_s = q_s + kMaxRows * kD;              // [kKeyTile, kS]
  float* v_s = k_s + kKeyTile * kS;              // [kKeyTile, kS]
  int* row_lo = reinterpret_cast<int*>(v_s + kKeyTile * kS);  // [kMaxRows] each
  int* row_hi = row_lo + kMaxRows;
  int* flag_s = row_hi + kMaxRows;
  int* seq_s = flag_s + kMaxRows;
  int* pos_s = seq_s + kMaxRows;

  const AttentionBatch& b = a.b;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int hd = static_cast<int>(b.head_dim);
  // Late tiles see the most keys: they start first, so the grid ends evenly.
  const int64_t t0 = (static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x) * kTileTokens;
  const int nt = static_cast<int>(attn::imin(kTileTokens, b.n_tokens - t0));
  const int64_t h = blockIdx.y;
  const int64_t kvh = h / (b.n_heads / b.n_kv_heads);

  bool tiled = false;
  if (tid < kMaxRows) {
    const bool in = tid < nt;
    flag_s[tid] = in ? a.flags[t0 + tid] : 0;
    seq_s[tid] = in ? a.b.seq_ids[t0 + tid] : -1;
    pos_s[tid] = in ? a.b.pos[t0 + tid] : 0;
    tiled = in && (flag_s[tid] & kTokenTiled);
  }
  if (!__syncthreads_or(tiled)) return;  // the tile is all decode tokens

  for (int it = tid; it < kMaxRows * kD; it += kThreads) {
    const int r = it / kD, d = it % kD;
    q_s[it] = r < nt && d < hd ? a.q[(t0 + r) * a.ldq + h * hd + d] * b.scale : 0.0f;
  }
  attn::zero_tile_padding<kD>(hd, k_s, v_s);

  attn::KvHeadView kv = attn::kv_head_view<F>(a.c, b.n_kv_heads, kvh, hd, a.word);

  // The tile's runs of tiled tokens, one after another (a block-uniform loop over shared data).
  for (int start = 0; start < nt;) {
    if (!(flag_s[start] & kTokenTiled)) {
      ++start;
      continue;
    }
    int end = start + 1;
    while (end < nt && (flag_s[end] & kTokenTiled) && seq_s[end] == seq_s[start]) ++end;
    __syncthreads();  // the previous run is done with row_lo / row_hi and the key tiles
    if (tid < kMaxRows) {
      const bool active = tid >= start && tid < end && (flag_s[tid] & kTokenValid);
      row_lo[tid] = active ? static_cast<int>(attention_first_key(pos_s[tid], b.sliding_window)) : 1;
      row_hi[tid] = active ? pos_s[tid] : 0;
    }
    __syncthreads();
    int64_t first = INT64_MAX, last = -1;
    for (int r = start; r < end; ++r) {
      if (row_lo[r] > row_hi[r]) continue;
      first = row_lo[r] < first ? row_lo[r] : first;
      last = row_hi[r] > last ? row_hi[r] : last;
    }
    attn::RowAcc<kD, kRowsPerWarp> acc;
    acc.init();
    if (last >= 0) {  // some token of the run is valid, so its sequence id is
      kv.table_row = attn::kv_table_row(a.c, seq_s[start]);
      attn::attend_keys<F, kD, kRowsPerWarp>(kv, first, last, q_s, k_s, v_s, row_lo, row_hi,
                                             kMaxRows, acc);
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + kWarps * i;
      if (r < start || r >= end) continue;
      float* y = a.out + (t0 + r) * a.ldo + h * hd;
      if (flag_s[r] & kTokenValid) {
        attn::store_row(acc, i, hd, y);
      } else {
        attn::store_nan_row(hd, y);
      }
    }
    start = end;
  }
}

template <KvFormat F, int kD>
int launch(const PrefillArgs& a, unsigned tiles, cudaStream_t stream) {
  const size_t smem = attn::tile_smem_bytes(kD, kMaxRows);
  const int err = attn::allow_smem(attention_prefill_kernel<F, kD>, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(tiles, static_cast<unsigned>(a.b.n_heads));
  attention_prefill_kernel<F, kD><<<grid, kThreads, smem, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int attention_prefill(const AttentionBatch& batch, const PagedKv& cache, const float* q,
                      int64_t ldq, const uint8_t* flags, float* out, int64_t ldo,
                      cudaStream_t stream) {
  // Fewer tokens than a tiled run cannot hold one: nothing to launch.
  if (batch.n_tokens < kMinTiledRun) return cudaSuccess;
  if (attn::padded_head_dim(batch.head_dim) == 0 || batch.n_heads <= 0 ||
      batch.n_kv_heads <= 0 || batch.n_heads % batch.n_kv_heads != 0 ||
      batch.n_heads > kMaxGridY || cache.block_size <= 0) {
    return cudaErrorInvalidValue;
  }
  const PrefillArgs a{batch, cache, q, ldq, flags, out, ldo, attn::kv_word_reads(cache, batch.head_dim)};
  const unsigned tiles = static_cast<unsigned>(ceil_div(batch.n_tokens, kTileTokens));
  return attn::dispatch_kv(cache.format, batch.head_dim, [&](auto f, auto d) {
    return launch<decltype(f)::value, decltype(d)::value>(a, tiles, stream);
  });
}

}  // namespace sampan::cuda
