// Rope: one thread block per token. threadIdx.x walks the frequencies (consecutive threads touch
// consecutive floats of a head, so loads coalesce), threadIdx.y walks the heads; each thread
// computes cos/sin of its frequencies once and applies them to every head it visits.
#include <climits>

#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/rope.cuh"

namespace sampan::cuda {
namespace {

constexpr int kRopeMaxThreads = 256;

__global__ void __launch_bounds__(kRopeMaxThreads) rope_kernel(int64_t n_tokens, int n_heads, int head_dim,
                            const float* x, int64_t ldx,           // [n_tokens, n_heads * head_dim]
                            const int32_t* __restrict__ pos,       // [n_tokens]
                            const float* __restrict__ inv_freq,    // [head_dim / 2]
                            float attn_factor,
                            float* y, int64_t ldy) {               // [n_tokens, n_heads * head_dim]
  const int half = head_dim / 2;
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const float p = static_cast<float>(pos[t]);
    const float* xt = x + t * ldx;
    float* yt = y + t * ldy;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      // The f32 product first (__fmul_rn: never contracted), then double cos/sin: at positions
      // past 100k the angle is large and f32 range reduction would lose digits.
      const double angle = static_cast<double>(__fmul_rn(p, inv_freq[i]));
      double s, c;
      sincos(angle, &s, &c);
      const float cf = static_cast<float>(c) * attn_factor;
      const float sf = static_cast<float>(s) * attn_factor;
      for (int h = threadIdx.y; h < n_heads; h += blockDim.y) {
        const int64_t o = static_cast<int64_t>(h) * head_dim + i;
        const float a = xt[o];
        const float b = xt[o + half];
        // Products rounded separately, as the CPU kernel does (no FMA contraction).
        yt[o] = __fsub_rn(__fmul_rn(a, cf), __fmul_rn(b, sf));
        yt[o + half] = __fadd_rn(__fmul_rn(b, cf), __fmul_rn(a, sf));
      }
    }
  }
}

}  // namespace

int rope(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const float* x, int64_t ldx,
         const int32_t* pos, const float* inv_freq, float attn_factor, float* y, int64_t ldy,
         cudaStream_t stream) {
  if (n_tokens <= 0 || n_heads <= 0 || head_dim < 2) return cudaSuccess;
  if (head_dim % 2 != 0 || head_dim > INT_MAX || n_heads > INT_MAX) return cudaErrorInvalidValue;
  const int64_t half = head_dim / 2;
  // 128 frequencies per row of threads covers every common head_dim (<= 256) in one pass; the
  // rest of the block goes to heads.
  const int bx = static_cast<int>(min64(ceil_div(half, kWarpSize) * kWarpSize, 128));
  const int by = static_cast<int>(max64(min64(n_heads, kRopeMaxThreads / bx), 1));
  rope_kernel<<<row_grid(n_tokens), dim3(bx, by), 0, stream>>>(
      n_tokens, static_cast<int>(n_heads), static_cast<int>(head_dim), x, ldx, pos, inv_freq,
      attn_factor, y, ldy);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
