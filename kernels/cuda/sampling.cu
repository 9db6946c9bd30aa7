#include "kernels/cuda/sampling.cuh"

#include <cfloat>
#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr float kGreedyTemperature = 1e-5f;  // engine/runtime/sampler.cc's threshold

// A float's bits as an unsigned key with the same order (larger float, larger key); -inf is the
// smallest finite-or-infinite key. NaN never reaches it (rows with NaN are rejected first).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (value, id) with the CPU's ranking: larger value first, lower id on ties.
__device__ __forceinline__ bool ranks_before(float a, int32_t ia, float b, int32_t ib) {
  return a > b || (a == b && ia < ib);
}

// The best (value, id) of a warp by ranks_before, in every lane (a fixed shuffle tree).
__device__ __forceinline__ void warp_argmax(float& v, int32_t& id) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (ranks_before(ov, oi, v, id)) {
      v = ov;
      id = oi;
    }
  }
}

// The best (value, id) of the block, in every thread (deterministic like block_sum, whose
// barrier pattern it follows). sv, si: [32] shared.
__device__ __forceinline__ void block_argmax(float& v, int32_t& id, float* sv, int32_t* si) {
  warp_argmax(v, id);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = id;
  }
  __syncthreads();
  const bool live = lane < static_cast<int>(blockDim.x >> 5);
  v = live ? sv[lane] : -INFINITY;
  id = live ? si[lane] : INT32_MAX;
  warp_argmax(v, id);
}

// The kept set of one row, as a predicate on (id, scaled logit): strictly above a key
// threshold, or at the threshold with an id below a bound (the tie rule: lowest ids first).
struct Cut {
  uint32_t key = 0;       // 0 with id_bound INT32_MAX: keeps everything
  int32_t id_bound = INT32_MAX;
  __device__ bool keeps(uint32_t k, int32_t id) const {
    return k > key || (k == key && id < id_bound);
  }
};

struct RowView {
  const float* row;  // [vocab]
  int64_t vocab;
  float t;
  // The CPU divides (not x * (1 / t)); so do we: the same scaled bits per element.
  __device__ float scaled(int64_t i) const { return row[i] / t; }
};

// Sum over the row of f(i, x, key) (T: int for counts, double for masses).
template <typename T, typename F>
__device__ T row_sum(const RowView& r, F f, T* scratch) {
  T acc = T(0);
  for (int64_t i = threadIdx.x; i < r.vocab; i += blockDim.x) {
    const float x = r.scaled(i);
    acc += f(static_cast<int32_t>(i), x, order_key(x));
  }
  return block_sum<T>(acc, scratch);
}

// The largest key K with measure(key >= K among `inside`) >= target, bit by bit from the top;
// then the id bound that keeps exactly enough ties at K. measure is a count (top_k) or a mass
// (top_p); `tie_need` turns the measure strictly above K into how many tie ids to keep.
template <typename T, typename W, typename In, typename Need>
__device__ Cut select_cut(const RowView& r, T target, W weight, In inside, Need tie_need,
                          T* scratch, int* iscratch) {
  uint32_t prefix = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = prefix | (1u << bit);
    const T m = row_sum<T>(
        r,
        [&](int32_t id, float x, uint32_t k) {
          return inside(id, k) && k >= cand ? weight(x) : T(0);
        },
        scratch);
    if (m >= target) prefix = cand;
  }
  const T above = row_sum<T>(
      r,
      [&](int32_t id, float x, uint32_t k) {
        return inside(id, k) && k > prefix ? weight(x) : T(0);
      },
      scratch);
  const int ties = row_sum<int>(
      r, [&](int32_t id, float, uint32_t k) { return inside(id, k) && k == prefix ? 1 : 0; },
      iscratch);
  int need = tie_need(above, prefix);
  need = need < 1 ? 1 : (need > ties ? ties : need);
  // Smallest id bound B with #(ties with id < B) >= need: binary search over [1, vocab].
  int32_t lo = 1, hi = static_cast<int32_t>(r.vocab);
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    const int n = row_sum<int>(
        r,
        [&](int32_t id, float, uint32_t k) {
          return inside(id, k) && k == prefix && id < mid ? 1 : 0;
        },
        iscratch);
    if (n >= need) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return Cut{prefix, lo};
}

// One block per row (rows past the grid are looped over). logits: [batch, ld] f32; params,
// ids: [batch].
__global__ void __launch_bounds__(kThreads)
    sample_tokens_kernel(const float* __restrict__ logits, int64_t batch, int64_t vocab,
                         int64_t ld, const SamplingRowParams* __restrict__ params,
                         int32_t* __restrict__ ids) {
  __shared__ double dscratch[32];
  __shared__ int iscratch[32];
  __shared__ float fscratch[32];
  __shared__ int32_t idscratch[32];
  __shared__ double chunk_prefix[kThreads];
  __shared__ int chosen_thread;
  __shared__ double draw;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    const float* row = logits + b * ld;
    const SamplingRowParams p = params[b];

    // Validity (the CPU's check_inputs) and the raw argmax, lowest id on ties.
    int bad = 0, finite = 0;
    float best = -INFINITY;
    int32_t best_id = INT32_MAX;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float x = row[i];
      bad |= (isnan(x) || x == INFINITY) ? 1 : 0;
      finite |= isfinite(x) ? 1 : 0;
      if (ranks_before(x, static_cast<int32_t>(i), best, best_id)) {
        best = x;
        best_id = static_cast<int32_t>(i);
      }
    }
    bad = block_sum<int>(bad, iscratch);
    finite = block_sum<int>(finite, iscratch);
    if (bad > 0 || finite == 0) {
      if (threadIdx.x == 0) ids[b] = -1;
      continue;
    }
    const bool greedy = p.temperature < kGreedyTemperature;
    const bool top_k_on = p.top_k > 0 && p.top_k < vocab;
    const bool top_p_on = p.top_p < 1.0f;
    const bool min_p_on = p.min_p > 0.0f;
    if (greedy) {
      block_argmax(best, best_id, fscratch, idscratch);
      if (threadIdx.x == 0) ids[b] = best_id;
      continue;
    }
    const RowView r{row, vocab, p.temperature};
    float m = -INFINITY;
    int32_t m_id = INT32_MAX;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float x = r.scaled(i);
      if (ranks_before(x, static_cast<int32_t>(i), m, m_id)) {
        m = x;
        m_id = static_cast<int32_t>(i);
      }
    }
    block_argmax(m, m_id, fscratch, idscratch);
    auto weight = [m](float x) { return static_cast<double>(expf(x - m)); };
    auto all = [](int32_t, uint32_t) { return true; };

    Cut k_cut;
    if (top_k_on) {
      k_cut = select_cut<int>(
          r, p.top_k, [](float) { return 1; }, all,
          [&](int above, uint32_t) { return p.top_k - above; }, iscratch, iscratch);
    }
    auto in_k = [k_cut](int32_t id, uint32_t k) { return k_cut.keeps(k, id); };
    Cut p_cut;
    if (top_p_on) {
      const double z = row_sum<double>(
          r, [&](int32_t id, float x, uint32_t k) { return in_k(id, k) ? weight(x) : 0.0; },
          dscratch);
      const double target = static_cast<double>(p.top_p) * z;
      p_cut = select_cut<double>(
          r, target, weight, in_k,
          [&](double above, uint32_t key) {
            // Each tie has the same weight: as many as close the gap to the target.
            const float x = __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
            const double w = weight(x);
            if (!(w > 0.0)) return INT32_MAX;  // -inf ties add nothing: keep them all (clamped)
            const double n = ceil((target - above) / w);
            return n >= static_cast<double>(INT32_MAX) ? INT32_MAX : static_cast<int>(n);
          },
          dscratch, iscratch);
    }
    auto kept = [&](int32_t id, float x, uint32_t k) {
      return in_k(id, k) && p_cut.keeps(k, id) && (!min_p_on || expf(x - m) >= p.min_p);
    };

    // The draw: cumulative weights in id order, each thread over one contiguous chunk.
    const int64_t chunk = (vocab + blockDim.x - 1) / blockDim.x;
    const int64_t begin_raw = static_cast<int64_t>(threadIdx.x) * chunk;
    const int64_t begin = begin_raw < vocab ? begin_raw : vocab;
    const int64_t end = begin + chunk < vocab ? begin + chunk : vocab;
    double mine = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const float x = r.scaled(i);
      if (kept(static_cast<int32_t>(i), x, order_key(x))) mine += weight(x);
    }
    chunk_prefix[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
      // Serial over the block's chunks: fixed order, so the same bits every run.
      double total = 0.0;
      for (unsigned t = 0; t < blockDim.x; ++t) total += chunk_prefix[t];
      const double u = philox_uniform(p.seed, p.step) * total;
      double acc = 0.0;
      int pick = -1;
      for (unsigned t = 0; t < blockDim.x; ++t) {
        const double w = chunk_prefix[t];
        chunk_prefix[t] = acc;  // becomes the exclusive prefix the chosen thread starts from
        if (w > 0.0 && (pick < 0 || acc <= u)) pick = static_cast<int>(t);
        acc += w;
      }
      chosen_thread = pick;
      draw = u;
      if (pick < 0) ids[b] = -1;  // unreachable: the max always survives every filter
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) == chosen_thread) {
      const double u = draw;
      double acc = chunk_prefix[threadIdx.x];
      int32_t pick = -1;
      for (int64_t i = begin; i < end; ++i) {
        const float x = r.scaled(i);
        if (!kept(static_cast<int32_t>(i), x, order_key(x))) continue;
        const double w = weight(x);
        if (w <= 0.0) continue;
        pick = static_cast<int32_t>(i);  // also the fallback if rounding leaves u past the sum
        acc += w;
        if (u < acc) break;
      }
      ids[b] = pick;
    }
    __syncthreads();  // chunk_prefix and chosen_thread are reused by the next row
  }
}

}  // namespace

int sample_tokens(const float* logits, int64_t batch, int64_t vocab, int64_t ld,
                  const SamplingRowParams* params, int32_t* ids, cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  if (vocab < 1 || ld < vocab || vocab > INT32_MAX - 1) return cudaErrorInvalidValue;
  sample_tokens_kernel<<<row_grid(batch), kThreads, 0, stream>>>(logits, batch, vocab, ld,
                                                                   params, ids);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
