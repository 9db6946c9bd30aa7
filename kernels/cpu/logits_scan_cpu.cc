#include "kernels/cpu/logits_scan_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu {
namespace {

// x[i, i + r) in lanes 0..r-1 and `fill` in the rest (r in 1..8).
inline __m256 load_tail(const float* x, int r, float fill) {
  return _mm256_blendv_ps(_mm256_set1_ps(fill), Avx2::load_n(x, r),
                          _mm256_castsi256_ps(Avx2::lane_mask(r)));
}

// Appends to out the indices j in [i, min(i + 8, n)) with x[j] >= vt's value.
inline void append_at_least(int64_t n, const float* x, int64_t i, __m256 vt,
                            std::vector<int32_t>& out) {
  const int r = n - i < 8 ? static_cast<int>(n - i) : 8;
  const __m256 v = r == 8 ? _mm256_loadu_ps(x + i)
                          : load_tail(x + i, r, -std::numeric_limits<float>::infinity());
  unsigned m = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v, vt, _CMP_GE_OQ)));
  if (r < 8) m &= (1u << r) - 1;
  while (m != 0) {
    out.push_back(static_cast<int32_t>(i + __builtin_ctz(m)));
    m &= m - 1;
  }
}

}  // namespace

LogitsScan scan_logits(int64_t n, const float* x) {
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 bad = _mm256_setzero_ps(), finite = _mm256_setzero_ps();
  auto step = [&](__m256 v) {
    // NaN (unordered) or +inf; finite: |v| < inf (false for NaN).
    bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q),
                                         _mm256_cmp_ps(v, inf, _CMP_EQ_OQ)));
    finite = _mm256_or_ps(finite, _mm256_cmp_ps(Avx2::abs(v), inf, _CMP_LT_OQ));
    mx = _mm256_max_ps(mx, v);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) step(_mm256_loadu_ps(x + i));
  if (i < n) {
    step(load_tail(x + i, static_cast<int>(n - i), -std::numeric_limits<float>::infinity()));
  }
  LogitsScan s;
  if (_mm256_movemask_ps(bad) != 0) {
    for (int64_t j = 0; j < n; ++j) {
      if (std::isnan(x[j]) || x[j] == std::numeric_limits<float>::infinity()) {
        s.first_bad = j;
        break;
      }
    }
  }
  s.any_finite = _mm256_movemask_ps(finite) != 0;
  s.max = Avx2::reduce_max(mx);
  return s;
}

int64_t argmax_first(int64_t n, const float* x) {
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  float best = Avx2::reduce_max(mx);
  for (; i < n; ++i) best = std::max(best, x[i]);
  const __m256 vb = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vb, _CMP_EQ_OQ));
    if (m != 0) return i + __builtin_ctz(static_cast<unsigned>(m));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // unreachable for n >= 1 without NaN
}

void top_k_candidates(int64_t n, const float* x, int64_t k, std::vector<int32_t>& out) {
  out.clear();
  if (k >= n) {
    for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(i));
    return;
  }
  // Indices with x >= t, t a lower bound of the k-th largest value: -inf at first, raised to
  // the k-th largest of the candidates whenever they pass `cap`, so everything dropped is
  // strictly below k values already seen.
  size_t cap = static_cast<size_t>(4 * k + 8);
  float t = -std::numeric_limits<float>::infinity();
  std::vector<float> vals;
  auto raise = [&] {
    vals.resize(out.size());
    for (size_t j = 0; j < out.size(); ++j) vals[j] = x[out[j]];
    std::nth_element(vals.begin(), vals.begin() + (k - 1), vals.end(), std::greater<float>());
    t = vals[static_cast<size_t>(k - 1)];
    size_t w = 0;
    for (const int32_t id : out) {
      if (x[id] >= t) out[w++] = id;
    }
    out.resize(w);
  };
  __m256 vt = _mm256_set1_ps(t);
  for (int64_t i = 0; i < n; i += 8) {
    append_at_least(n, x, i, vt, out);
    if (out.size() > cap) {
      raise();
      vt = _mm256_set1_ps(t);
      // Ties at t (or fewer than k values above -inf) can keep more than cap: grow it, so
      // that raising stays amortized.
      if (out.size() > cap / 2) cap = 2 * out.size();
    }
  }
}

void indices_at_least(int64_t n, const float* x, float t, std::vector<int32_t>& out) {
  out.clear();
  const __m256 vt = _mm256_set1_ps(t);
  for (int64_t i = 0; i < n; i += 8) append_at_least(n, x, i, vt, out);
}

void exponent_masses(int64_t n, const float* x, double mass[256]) {
  // Four interleaved tables, so that runs of weights in one range do not chain every addition
  // through the same slot.
  double part[4][256] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) {
      uint32_t b;
      std::memcpy(&b, x + i + j, 4);
      part[j][(b >> 23) & 255] += x[i + j];
    }
  }
  for (; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    part[0][(b >> 23) & 255] += x[i];
  }
  for (int e = 0; e < 256; ++e) mass[e] += (part[0][e] + part[1][e]) + (part[2][e] + part[3][e]);
}

}  // namespace sampan::cpu
