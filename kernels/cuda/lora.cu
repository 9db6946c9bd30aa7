#include "kernels/cuda/lora.cuh"

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

constexpr int kShrinkWarps = 8;     // tokens per shrink block
constexpr int kExpandThreads = 128;  // output columns per expand block
constexpr int kExpandTokens = 8;     // tokens per expand block

// Whether token t's adapter k adds anything; false for -1, a bad id and a scale of 0.
__device__ __forceinline__ bool adds(int32_t k, int64_t n_adapters, const float* scale) {
  return k >= 0 && k < n_adapters && scale[k] != 0.0f;
}

// R: ranks per chunk (registers); gridDim.y chunks cover r_max. kVec: x rows and A rows are
// 16-byte aligned and `in` a multiple of 4.
template <int R, bool kVec>
__global__ void __launch_bounds__(kShrinkWarps * 32)
    lora_shrink_kernel(int64_t n_tokens, int64_t in, int64_t slice, int64_t n_adapters,
                       int64_t r_max, const float* __restrict__ x, int64_t ldx,
                       const int32_t* __restrict__ ids, const float* __restrict__ a,
                       const float* __restrict__ scale, float* __restrict__ h, FaultSink fault) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kShrinkWarps + (threadIdx.x >> 5);
  if (t >= n_tokens) return;
  const int32_t k = ids[t];
  if (k < -1 || k >= n_adapters) {
    if (lane == 0 && blockIdx.y == 0 && blockIdx.z == 0) report_fault(fault, kLoraBadAdapter);
    return;
  }
  if (!adds(k, n_adapters, scale)) return;  // the expand copies y for it
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * R;
  const int jn = static_cast<int>(r_max - j0 < R ? r_max - j0 : R);
  // This block's slice of the reduction: [c0, c1).
  const int64_t c0 = static_cast<int64_t>(blockIdx.z) * slice;
  const int64_t c1 = c0 + slice < in ? c0 + slice : in;
  const float* xr = x + t * ldx;
  const float* ar = a + (static_cast<int64_t>(k) * r_max + j0) * in;
  float acc[R];
#pragma unroll
  for (int j = 0; j < R; ++j) acc[j] = 0.0f;
  if constexpr (kVec) {
    for (int64_t c = c0 + 4 * lane; c < c1; c += 128) {
      const float4 xv = __ldg(reinterpret_cast<const float4*>(xr + c));
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (j < jn) {
          const float4 av = __ldg(reinterpret_cast<const float4*>(ar + j * in + c));
          acc[j] += xv.x * av.x + xv.y * av.y + xv.z * av.z + xv.w * av.w;
        }
      }
    }
  } else {
    for (int64_t c = c0 + lane; c < c1; c += 32) {
      const float xv = __ldg(xr + c);
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (j < jn) acc[j] += xv * __ldg(ar + j * in + c);
      }
    }
  }
  // The slice's partial sums, [n_tokens][gridDim.z][r_max]; the expand adds the slices.
  float* hp = h + (t * gridDim.z + blockIdx.z) * r_max + j0;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const float v = warp_sum(acc[j]);  // every lane takes part: the shuffles use the full mask
    if (lane == 0 && j < jn) hp[j] = v;
  }
}

// kVec: B rows 16-byte aligned and r_max a multiple of 4. Dynamic shared memory: kExpandTokens
// rows of h (r_max floats each).
template <bool kVec>
__global__ void __launch_bounds__(kExpandThreads)
    lora_expand_kernel(int64_t n_tokens, int64_t out, int64_t n_adapters, int64_t r_max,
                       int64_t n_slices,
                       const float* y, int64_t ldy, const int32_t* __restrict__ ids,
                       const float* __restrict__ b, const float* __restrict__ scale,
                       const float* __restrict__ h, float* y_out, int64_t ldo) {
  extern __shared__ float hs[];  // [kExpandTokens][r_max]
  // y may be y_out (same stride): each thread reads its element before writing it.
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kExpandThreads + threadIdx.x;
  const int64_t n_groups = (n_tokens + kExpandTokens - 1) / kExpandTokens;
  for (int64_t g = blockIdx.y; g < n_groups; g += gridDim.y) {
    const int64_t t0 = g * kExpandTokens;
    const int nt = static_cast<int>(n_tokens - t0 < kExpandTokens ? n_tokens - t0 : kExpandTokens);
    __syncthreads();  // the previous group's readers are done with hs
    for (int64_t i = threadIdx.x; i < nt * r_max; i += kExpandThreads) {
      const int64_t t = t0 + i / r_max;
      const int32_t k = ids[t];
      if (!adds(k, n_adapters, scale)) continue;
      // The slices' partial sums in a fixed order, then the scale (the CPU's order: x A^T,
      // then times s).
      const float* hp = h + t * n_slices * r_max + i % r_max;
      float v = 0.0f;
      for (int64_t sl = 0; sl < n_slices; ++sl) v += hp[sl * r_max];
      hs[i] = v * scale[k];
    }
    __syncthreads();
    if (o >= out) continue;
    for (int tt = 0; tt < nt; ++tt) {
      const int64_t t = t0 + tt;
      const int32_t k = ids[t];
      const float yv = y[t * ldy + o];
      float r;
      if (k < -1 || k >= n_adapters) {
        r = __int_as_float(0x7fc00000);  // reported by the shrink
      } else if (!adds(k, n_adapters, scale)) {
        r = yv;
      } else {
        const float* br = b + (static_cast<int64_t>(k) * out + o) * r_max;
        const float* hr = hs + static_cast<int64_t>(tt) * r_max;
        float d = 0.0f;
        if constexpr (kVec) {
          for (int64_t j = 0; j < r_max; j += 4) {
            const float4 bv = __ldg(reinterpret_cast<const float4*>(br + j));
            d += hr[j] * bv.x + hr[j + 1] * bv.y + hr[j + 2] * bv.z + hr[j + 3] * bv.w;
          }
        } else {
          for (int64_t j = 0; j < r_max; ++j) d += hr[j] * __ldg(br + j);
        }
        r = yv + d;
      }
      y_out[t * ldo + o] = r;
    }
  }
}

template <int R>
void launch_shrink(bool vec, dim3 grid, cudaStream_t stream, int64_t n_tokens, int64_t in,
                   int64_t slice, int64_t n_adapters, int64_t r_max, const float* x, int64_t ldx,
                   const int32_t* ids, const float* a, const float* scale, float* h,
                   FaultSink fault) {
  if (vec) {
    lora_shrink_kernel<R, true><<<grid, kShrinkWarps * 32, 0, stream>>>(
        n_tokens, in, slice, n_adapters, r_max, x, ldx, ids, a, scale, h, fault);
  } else {
    lora_shrink_kernel<R, false><<<grid, kShrinkWarps * 32, 0, stream>>>(
        n_tokens, in, slice, n_adapters, r_max, x, ldx, ids, a, scale, h, fault);
  }
}

}  // namespace

int lora_apply(int64_t n_tokens, int64_t in, int64_t out, int64_t n_adapters, int64_t r_max,
               const float* y, int64_t ldy, const float* x, int64_t ldx, const int32_t* ids,
               const float* a, const float* b, const float* scale, float* h, float* y_out,
               int64_t ldo, FaultSink fault, cudaStream_t stream) {
  if (n_tokens <= 0 || out <= 0) return cudaSuccess;
  if (r_max < 1 || r_max > kLoraMaxRank || in < 1) return cudaErrorInvalidValue;
  // Ranks in chunks of R (registers per lane); the common ranks 8 and 16 take one chunk.
  const int R = r_max <= 8 ? 8 : r_max <= 16 ? 16 : r_max <= 32 ? 32 : 64;
  const int64_t chunks = ceil_div(r_max, R);
  const int64_t blocks = ceil_div(n_tokens, kShrinkWarps);
  const int64_t slice = lora_slice_len(n_tokens, in);  // a multiple of 128: float4 steps stay aligned
  const int64_t slices = lora_slices(n_tokens, in);
  if (chunks > kMaxGridY || blocks > kMaxGridX || slices > kMaxGridY) {
    return cudaErrorInvalidConfiguration;
  }
  const dim3 sgrid(static_cast<unsigned>(blocks), static_cast<unsigned>(chunks),
                   static_cast<unsigned>(slices));
  const bool svec = in % 4 == 0 && ldx % 4 == 0 && aligned16(x) && aligned16(a);
  auto shrink = R == 8    ? launch_shrink<8>
                : R == 16 ? launch_shrink<16>
                : R == 32 ? launch_shrink<32>
                          : launch_shrink<64>;
  shrink(svec, sgrid, stream, n_tokens, in, slice, n_adapters, r_max, x, ldx, ids, a, scale, h,
         fault);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return static_cast<int>(e);
  const int64_t groups = ceil_div(n_tokens, kExpandTokens);
  const dim3 egrid(static_cast<unsigned>(ceil_div(out, kExpandThreads)),
                   static_cast<unsigned>(min64(groups, kMaxGridY)));
  const size_t smem = static_cast<size_t>(kExpandTokens * r_max) * sizeof(float);
  const bool evec = r_max % 4 == 0 && aligned16(b);
  if (evec) {
    lora_expand_kernel<true><<<egrid, kExpandThreads, smem, stream>>>(
        n_tokens, out, n_adapters, r_max, slices, y, ldy, ids, b, scale, h, y_out, ldo);
  } else {
    lora_expand_kernel<false><<<egrid, kExpandThreads, smem, stream>>>(
        n_tokens, out, n_adapters, r_max, slices, y, ldy, ids, b, scale, h, y_out, ldo);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
