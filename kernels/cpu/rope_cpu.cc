#include "kernels/cpu/rope_cpu.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

// Rope is a few multiplies per element, bound by memory at any vector width, so it has no
// AVX-512 variant.
namespace sampan::cpu {
namespace {

using S = Avx2;
using V = S::V;
constexpr int kW = S::kWidth;

// cos/sin of one position for every frequency, shared by all heads of the token. The angle is
// rounded to f32 first, as HF does (positions * inv_freq in f32), then its cos/sin are taken in
// double: at positions past 100k the angle is large and a short polynomial without careful range
// reduction would lose digits.
void angles(int32_t pos, int64_t half, const float* inv_freq, float attn_factor, float* c,
            float* s) {
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < half; ++i) {
    const double a = static_cast<double>(p * inv_freq[i]);
    c[i] = static_cast<float>(std::cos(a)) * attn_factor;
    s[i] = static_cast<float>(std::sin(a)) * attn_factor;
  }
}

// y1 = x1 c - x2 s, y2 = x2 c + x1 s for one head; both halves are loaded before either is
// stored, so y may be x.
void rotate_head(int64_t half, const float* x, const float* c, const float* s, float* y) {
  const float* x1 = x;
  const float* x2 = x + half;
  int64_t i = 0;
  for (; i + kW <= half; i += kW) {
    const V a = S::load(x1 + i), b = S::load(x2 + i);
    const V cv = S::load(c + i), sv = S::load(s + i);
    const V y1 = S::sub(S::mul(a, cv), S::mul(b, sv));
    const V y2 = S::add(S::mul(b, cv), S::mul(a, sv));
    S::store(y + i, y1);
    S::store(y + half + i, y2);
  }
  if (i < half) {
    const int n = static_cast<int>(half - i);
    const V a = S::load_n(x1 + i, n), b = S::load_n(x2 + i, n);
    const V cv = S::load_n(c + i, n), sv = S::load_n(s + i, n);
    const V y1 = S::sub(S::mul(a, cv), S::mul(b, sv));
    const V y2 = S::add(S::mul(b, cv), S::mul(a, sv));
    S::store_n(y + i, y1, n);
    S::store_n(y + half + i, y2, n);
  }
}

}  // namespace

void rope(int64_t n_tokens, int64_t n_heads, int64_t head_dim, const float* x, int64_t ldx,
          const int32_t* pos, const float* inv_freq, float attn_factor, float* y, int64_t ldy,
          TaskRunner& runner) {
  if (n_tokens <= 0 || n_heads <= 0 || head_dim < 2) return;
  const int64_t half = head_dim / 2;
  const int64_t width = n_heads * head_dim;
  // The cos/sin table costs about as much as rotating a few heads, so a task holds at least a
  // few thousand elements.
  const int64_t grain = width >= 4096 ? 1 : 4096 / width;
  util::parallel_for(runner, n_tokens, grain, [&](int64_t t0, int64_t t1) {
    constexpr int64_t kStackHalf = 256;
    float stack_c[kStackHalf], stack_s[kStackHalf];
    std::vector<float> heap;
    float* c = stack_c;
    float* s = stack_s;
    if (half > kStackHalf) {
      heap.resize(static_cast<size_t>(2 * half));
      c = heap.data();
      s = c + half;
    }
    for (int64_t t = t0; t < t1; ++t) {
      angles(pos[t], half, inv_freq, attn_factor, c, s);
      const float* xt = x + t * ldx;
      float* yt = y + t * ldy;
      for (int64_t h = 0; h < n_heads; ++h) {
        rotate_head(half, xt + h * head_dim, c, s, yt + h * head_dim);
      }
    }
  });
}

}  // namespace sampan::cpu
