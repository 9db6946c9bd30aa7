// kv_write: one thread block per (token, K or V), one warp per KV head. A head is quantized by
// its warp: absmax / min / max are warp reductions, which are exact (order-free) for maxima and
// minima, so the scales and codes are the CPU's bit for bit (kernels/cpu/kv_quant.cc).
#include "kernels/cuda/attention_kv_format.cuh"
#include "kernels/cuda/kv_write.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// kv_quant.cc clamp_round: x rounded to an integer in [lo, hi]; NaN gives 0.
__device__ __forceinline__ int clamp_round(float x, float lo, float hi) {
  if (!(x >= lo)) return x < lo ? static_cast<int>(lo) : 0;
  if (x > hi) return static_cast<int>(hi);
  return static_cast<int>(rintf(x));
}

// The CPU's sequential absmax (`fabs(x) > m ? fabs(x) : m` from 0): NaN never wins, so the
// result is the largest |x| over the non-NaN elements, in any order.
__device__ float warp_absmax(const float* x, int64_t n, int lane) {
  float m = 0.0f;
  for (int64_t i = lane; i < n; i += 32) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(kFull, m, o);
    m = other > m ? other : m;
  }
  return m;
}

// The CPU's sequential group minimum (kMin) or maximum of x[0, n): it starts from x[0] and takes
// an element only when strictly smaller (larger). So it is NaN when x[0] is, else the extreme
// over the non-NaN elements, and when that extreme is a zero, the first zero in index order (its
// sign is what reaches the stored f16 minimum).
template <bool kMin>
__device__ float warp_group_extreme(const float* x, int64_t n, int lane) {
  float e = kMin ? INFINITY : -INFINITY;
  for (int64_t i = lane; i < n; i += 32) e = kMin ? fminf(e, x[i]) : fmaxf(e, x[i]);
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(kFull, e, o);
    e = kMin ? fminf(e, other) : fmaxf(e, other);
  }
  if (isnan(x[0])) return x[0];
  if (e != 0.0f) return e;
  int64_t first = INT64_MAX;
  for (int64_t i = lane; i < n && first == INT64_MAX; i += 32) {
    if (x[i] == 0.0f) first = i;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t other = __shfl_xor_sync(kFull, first, o);
    first = other < first ? other : first;
  }
  return x[first];
}

// One head of head_dim values x -> its record dst (kv_quant.h layout). Called by a whole warp.
__device__ void quantize_head(KvFormat f, const float* __restrict__ x, int64_t hd,
                              uint8_t* __restrict__ dst, int lane) {
  switch (f) {
    case KvFormat::kF32: {
      float* d = reinterpret_cast<float*>(dst);  // f32 records are 4-byte aligned (hd * 4)
      for (int64_t i = lane; i < hd; i += 32) d[i] = x[i];
      return;
    }
    case KvFormat::kBF16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst);  // bf16 records are 2-byte aligned
      for (int64_t i = lane; i < hd; i += 32) d[i] = kv_f32_to_bf16(x[i]);
      return;
    }
    case KvFormat::kF8E4M3:
    case KvFormat::kI8: {
      const bool fp8 = f == KvFormat::kF8E4M3;
      float scale = warp_absmax(x, hd, lane) / (fp8 ? 448.0f : 127.0f);
      if (!(scale > 0.0f) || !isfinite(scale)) scale = 0.0f;
      for (int64_t i = lane; i < hd; i += 32) {
        const float v = scale > 0.0f ? x[i] / scale : 0.0f;
        dst[i] = fp8 ? kv_f32_to_e4m3(v)
                     : static_cast<uint8_t>(static_cast<int8_t>(clamp_round(v, -127.0f, 127.0f)));
      }
      if (lane == 0) kv_store_f32(dst + hd, scale);
      return;
    }
    case KvFormat::kI4: {
      const int64_t gs = kv_i4_group(hd);
      uint8_t* params = dst + (hd + 1) / 2;
      for (int64_t g0 = 0; g0 < hd; g0 += gs) {
        const float lo = warp_group_extreme<true>(x + g0, gs, lane);
        const float hi = warp_group_extreme<false>(x + g0, gs, lane);
        const uint32_t s16 = kv_f32_to_f16_sat((hi - lo) / 15.0f);
        const uint32_t m16 = kv_f32_to_f16_sat(lo);
        if (lane == 0) {
          kv_store_u16(params + g0 / gs * 4, s16);
          kv_store_u16(params + g0 / gs * 4 + 2, m16);
        }
        // Quantized against the stored f16 values, as the CPU does.
        const float s = kv_f16_to_f32(s16), m = kv_f16_to_f32(m16);
        // Elements 2j (low nibble) and 2j+1 (high) sit in neighbouring lanes of one pass: the
        // group starts at an even element and a pass covers 32 consecutive elements.
        for (int64_t c = g0; c < g0 + gs; c += 32) {
          const int64_t i = c + lane;
          const bool in = i < g0 + gs;
          const int u = in && s > 0.0f ? clamp_round((x[i] - m) / s, 0.0f, 15.0f) : 0;
          const int hi_u = __shfl_down_sync(kFull, u, 1);
          if (in && (lane & 1) == 0) {
            const int upper = i + 1 < g0 + gs ? hi_u : 0;  // an odd head leaves the last nibble 0
            dst[i / 2] = static_cast<uint8_t>(u | upper << 4);
          }
        }
      }
      return;
    }
  }
}

__global__ void kv_write_kernel(AttentionBatch b,
                                const float* __restrict__ k, int64_t ldk,  // [n_tokens, kv_dim]
                                const float* __restrict__ v, int64_t ldv,  // [n_tokens, kv_dim]
                                PagedKv c) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int n_warps = static_cast<int>(blockDim.x) >> 5;
  const bool is_v = blockIdx.y == 1;
  const float* src = is_v ? v : k;
  const int64_t ld = is_v ? ldv : ldk;
  uint8_t* pool = static_cast<uint8_t*>(is_v ? c.v : c.k);
  const int64_t hd = b.head_dim;
  const int64_t head_bytes = kv_head_bytes(c.format, hd);
  const int64_t row_bytes = b.n_kv_heads * head_bytes;
  for (int64_t t = blockIdx.x; t < b.n_tokens; t += gridDim.x) {
    const int64_t s = b.seq_ids[t], p = b.pos[t];
    // Never a stray write: a bad index skips the token (the launcher reports it).
    if (s < 0 || s >= c.n_seqs || p < 0 || p / c.block_size >= c.max_blocks) continue;
    const int64_t block = c.block_tables[s * c.max_blocks + p / c.block_size];
    if (block < 0 || block >= c.n_blocks) continue;
    uint8_t* row = pool + (block * c.block_size + p % c.block_size) * row_bytes;
    for (int64_t h = warp; h < b.n_kv_heads; h += n_warps) {
      quantize_head(c.format, src + t * ld + h * hd, hd, row + h * head_bytes, lane);
    }
  }
}

}  // namespace

int kv_write(const AttentionBatch& batch, const float* k, int64_t ldk, const float* v,
             int64_t ldv, const PagedKv& cache, cudaStream_t stream) {
  if (batch.n_tokens <= 0 || batch.n_kv_heads <= 0 || batch.head_dim <= 0) return cudaSuccess;
  if (cache.block_size <= 0) return cudaErrorInvalidValue;
  // A warp per head, up to 8 heads at once (a GQA model has 1-8 KV heads).
  const int threads = static_cast<int>(min64(batch.n_kv_heads, 8)) * kWarpSize;
  const dim3 grid(static_cast<unsigned>(min64(batch.n_tokens, kMaxGridX)), 2);
  kv_write_kernel<<<grid, threads, 0, stream>>>(batch, k, ldk, v, ldv, cache);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
