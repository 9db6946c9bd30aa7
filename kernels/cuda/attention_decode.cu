// attention_decode: one thread block per (token, KV head, chunk of up to 64 of its query heads,
// split of the token's key range); the block runs attention_tile.cuh's core over its keys. With
// one split (or a range too short to split) it writes the normalised result; otherwise it
// leaves (unnormalised output, maximum, sum) per query head in scratch and merge_kernel folds
// the splits as the CPU's merge_splits does.
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_tile.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

using attn::kKeyTile;
using attn::kMaxRows;
using attn::kThreads;
using attn::kWarps;
static_assert(kMinSplitKeys >= kKeyTile, "a split shorter than a key tile leaves lanes idle");

// Keys per split of a range of len keys cut for n_splits, and how many splits are non-empty.
__host__ __device__ inline int64_t split_keys(int64_t len, int64_t n_splits) {
  const int64_t k = attn::idiv_up(len, n_splits);
  return k < kMinSplitKeys ? kMinSplitKeys : k;
}

struct DecodeArgs {
  AttentionBatch b;
  PagedKv c;
  const float* q;  // [n_tokens, n_heads * head_dim] row stride ldq
  int64_t ldq;
  const uint8_t* flags;  // [n_tokens]
  float* out;            // [n_tokens, n_heads * head_dim] row stride ldo
  int64_t ldo;
  bool word;
  int64_t n_splits;
  int64_t head_chunks;  // ceil(group / kMaxRows)
  float* part;          // [n_tokens, n_heads, n_splits, head_dim + 2]: o, then m and l
};

// kRpw rows per warp: 1 for groups of up to kWarps query heads, else kMaxRows / kWarps.
template <KvFormat F, int kD, int kRpw>
__global__ void __launch_bounds__(kThreads) attention_decode_kernel(DecodeArgs a) {
  constexpr int kS = attn::key_stride(kD);
  constexpr int kRows = kWarps * kRpw;
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);  // [kRows, kD]
  float* k_s = q_s + kRows * kD;                 // [kKeyTile, kS]
  float* v_s = k_s + kKeyTile * kS;              // [kKeyTile, kS]
  int* row_lo = reinterpret_cast<int*>(v_s + kKeyTile * kS);  // [kMaxRows] each
  int* row_hi = row_lo + kMaxRows;

  const AttentionBatch& b = a.b;
  const int64_t t = blockIdx.x;
  const uint8_t flag = a.flags[t];
  if (flag & kTokenTiled) return;  // attention_prefill's token
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int hd = static_cast<int>(b.head_dim);
  const int64_t group = b.n_heads / b.n_kv_heads;
  const int64_t kvh = blockIdx.y / a.head_chunks;
  const int64_t g0 = (blockIdx.y % a.head_chunks) * kMaxRows;
  const int n_rows = static_cast<int>(attn::imin(kRows, group - g0));
  const int64_t h0 = kvh * group + g0;  // the block's first query head
  const int64_t split = blockIdx.z;

  if (!(flag & kTokenValid)) {
    if (split == 0) {
      for (int r = warp; r < n_rows; r += kWarps) attn::store_nan_row(hd, a.out + t * a.ldo + (h0 + r) * hd);
    }
    return;
  }
  const int64_t p = b.pos[t];
  const int64_t lo = attention_first_key(p, b.sliding_window);
  const int64_t len = p - lo + 1;
  const int64_t keys = split_keys(len, a.n_splits);
  const int64_t n_active = attn::idiv_up(len, keys);
  if (split >= n_active) return;  // a short range: fewer pieces than the grid has splits
  const int64_t first = lo + split * keys;
  const int64_t last = attn::imin(p, first + keys - 1);

  if (tid < kMaxRows) {
    row_lo[tid] = static_cast<int>(first);
    row_hi[tid] = static_cast<int>(last);
  }
  for (int it = tid; it < kRows * kD; it += kThreads) {
    const int r = it / kD, d = it % kD;
    q_s[it] = r < n_rows && d < hd ? a.q[t * a.ldq + (h0 + r) * hd + d] * b.scale : 0.0f;
  }
  attn::zero_tile_padding<kD>(hd, k_s, v_s);

  attn::KvHeadView kv = attn::kv_head_view<F>(a.c, b.n_kv_heads, kvh, hd, a.word);
  kv.table_row = attn::kv_table_row(a.c, b.seq_ids[t]);

  attn::RowAcc<kD, kRpw> acc;
  acc.init();
  attn::attend_keys<F, kD, kRpw>(kv, first, last, q_s, k_s, v_s, row_lo, row_hi, n_rows, acc);

  const int lane = tid & 31;
#pragma unroll
  for (int i = 0; i < kRpw; ++i) {
    const int r = warp + kWarps * i;
    if (r >= n_rows) continue;
    const int64_t h = h0 + r;
    if (n_active == 1) {
      attn::store_row(acc, i, hd, a.out + t * a.ldo + h * hd);
      continue;
    }
    float* pp = a.part + ((t * b.n_heads + h) * a.n_splits + split) * (hd + 2);
    const float l = attn::warp_sum(acc.l[i]);
#pragma unroll
    for (int c = 0; c < kD / 32; ++c) {
      if (lane + 32 * c < hd) pp[lane + 32 * c] = acc.o[i][c];
    }
    if (lane == 0) {
      pp[hd] = acc.m[i];
      pp[hd + 1] = l;
    }
  }
}

constexpr int kMergeWarps = 4;  // query heads per merge block

// One warp per (token, query head) whose range was split: out = sum_s e^(m_s - M) o_s /
// sum_s e^(m_s - M) l_s, with M the largest m_s (a split whose scores were all -inf adds
// nothing; all of them: zeros, as the CPU).
__global__ void __launch_bounds__(kMergeWarps * 32)
    attention_merge_kernel(AttentionBatch b, const uint8_t* __restrict__ flags,  // [n_tokens]
                           int64_t n_splits,
                           const float* __restrict__ part,  // [n_tokens, n_heads, n_splits, hd+2]
                           float* __restrict__ out, int64_t ldo) {  // [n_tokens, n_heads * hd]
  const int64_t t = blockIdx.x;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kMergeWarps + (threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (h >= b.n_heads) return;
  const uint8_t flag = flags[t];
  if ((flag & kTokenTiled) || !(flag & kTokenValid)) return;
  const int64_t p = b.pos[t];
  const int64_t len = p - attention_first_key(p, b.sliding_window) + 1;
  const int64_t n_active = attn::idiv_up(len, split_keys(len, n_splits));
  if (n_active <= 1) return;  // the decode kernel wrote this row itself
  const int64_t hd = b.head_dim, stride = hd + 2;
  const float* base = part + (t * b.n_heads + h) * n_splits * stride;
  float m = -INFINITY;
  for (int64_t s = lane; s < n_active; s += 32) m = fmaxf(m, base[s * stride + hd]);
  m = attn::warp_max(m);
  float* y = out + t * ldo + h * hd;
  if (m == -INFINITY) {
    for (int64_t d = lane; d < hd; d += 32) y[d] = 0.0f;
    return;
  }
  float l = 0.0f;
  for (int64_t s = lane; s < n_active; s += 32) {
    const float ms = base[s * stride + hd];
    if (ms != -INFINITY) l += expf(ms - m) * base[s * stride + hd + 1];
  }
  l = attn::warp_sum(l);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int64_t d = lane; d < hd; d += 32) {
    float o = 0.0f;
    for (int64_t s = 0; s < n_active; ++s) {
      const float ms = base[s * stride + hd];
      if (ms != -INFINITY) o += expf(ms - m) * base[s * stride + d];
    }
    y[d] = o * inv;
  }
}

template <KvFormat F, int kD, int kRpw>
int launch(const DecodeArgs& a, cudaStream_t stream) {
  const size_t smem = attn::tile_smem_bytes(kD, kWarps * kRpw);
  const int err = attn::allow_smem(attention_decode_kernel<F, kD, kRpw>, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(a.b.n_tokens),
                  static_cast<unsigned>(a.b.n_kv_heads * a.head_chunks),
                  static_cast<unsigned>(a.n_splits));
  attention_decode_kernel<F, kD, kRpw><<<grid, kThreads, smem, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <KvFormat F, int kD>
int launch_rows(const DecodeArgs& a, cudaStream_t stream) {
  return a.b.n_heads / a.b.n_kv_heads <= kWarps ? launch<F, kD, 1>(a, stream)
                                                : launch<F, kD, kMaxRows / kWarps>(a, stream);
}

}  // namespace

int64_t attention_decode_splits(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads,
                                int64_t max_keys) {
  if (n_tokens <= 0 || n_kv_heads <= 0 || max_keys <= kMinSplitKeys) return 1;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();  // a failed query only costs the split; the launch reports real errors
    sms = 132;
  }
  const int64_t blocks = n_tokens * n_kv_heads * ceil_div(n_heads / n_kv_heads, kMaxRows);
  const int64_t want = ceil_div(2 * static_cast<int64_t>(sms), blocks);
  return max64(1, min64(min64(want, ceil_div(max_keys, kMinSplitKeys)), kMaxGridY));
}

size_t attention_decode_scratch_bytes(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                      int64_t n_splits) {
  if (n_splits <= 1) return 0;
  return static_cast<size_t>(n_tokens * n_heads * n_splits * (head_dim + 2)) * sizeof(float);
}

int attention_decode(const AttentionBatch& batch, const PagedKv& cache, const float* q,
                     int64_t ldq, const uint8_t* flags, int64_t n_splits, void* scratch,
                     float* out, int64_t ldo, cudaStream_t stream) {
  if (batch.n_tokens <= 0) return cudaSuccess;
  if (attn::padded_head_dim(batch.head_dim) == 0 || batch.n_heads <= 0 ||
      batch.n_kv_heads <= 0 || batch.n_heads % batch.n_kv_heads != 0 || cache.block_size <= 0 ||
      n_splits < 1 || n_splits > kMaxGridY || batch.n_tokens > kMaxGridX ||
      batch.n_heads > kMaxGridY * kMergeWarps ||
      (n_splits > 1 && scratch == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int64_t head_chunks = ceil_div(batch.n_heads / batch.n_kv_heads, kMaxRows);
  if (batch.n_kv_heads * head_chunks > kMaxGridY) return cudaErrorInvalidValue;
  const DecodeArgs a{batch, cache, q, ldq, flags, out, ldo,
                     attn::kv_word_reads(cache, batch.head_dim), n_splits, head_chunks,
                     static_cast<float*>(scratch)};
  const int err = attn::dispatch_kv(cache.format, batch.head_dim, [&](auto f, auto d) {
    return launch_rows<decltype(f)::value, decltype(d)::value>(a, stream);
  });
  if (err != cudaSuccess || n_splits == 1) return err;
  const dim3 grid(static_cast<unsigned>(batch.n_tokens),
                  static_cast<unsigned>(ceil_div(batch.n_heads, kMergeWarps)));
  attention_merge_kernel<<<grid, kMergeWarps * 32, 0, stream>>>(batch, flags, n_splits, a.part,
                                                                out, ldo);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
