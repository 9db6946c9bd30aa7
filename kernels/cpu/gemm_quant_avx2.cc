// AVX2 kernels for quantized weights (see gemm_quant.h): the fallback for CPUs without AVX-512
// (or SAMPAN_CPU_ISA=avx2). Everything stays in f32: 8 packed bytes of a kI4 row widen to 8
// 32-bit lanes, shifts sign-extend the low and the high nibbles (the even- and odd-indexed
// weights; x is prepared in the same even/odd order per 16 elements), and q * s - z * s is
// formed in registers per group (exact: q - z has at most 9 bits, s at most 11), so no per-group
// correction is needed. kF8E4M3 goes through f16 as in the AVX-512 file (2^-8 of the value, the
// per-row scale times 2^8 applied at the end; NaN codes read as +-480).
// 16 ymm registers: R = 2 rows by MB <= 4 rows of x keeps 8 accumulators.
#include <immintrin.h>

#include <bit>
#include <cstring>

#include "kernels/cpu/gemm_quant.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kPrefetchBytes = 1024;
constexpr int kRows = 2;
constexpr int kMaxM = 4;

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The f32 scale of an fp8 row; scales need only 2-byte alignment, like the weights.
inline float row_scale(const void* p) {
  float s;
  std::memcpy(&s, p, 4);
  return s;
}

inline float scale_at(const void* scales, int64_t g, bool bf16) {
  const uint16_t h = static_cast<const uint16_t*>(scales)[g];
  return bf16 ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : _cvtsh_ss(h);
}

inline __m256 in_register(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

inline __m128i load8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm_cvtsi64_si128(v);
}

// ---- kI4: x in pair layout per 16 elements (8 even, then 8 odd) ----

int64_t i4_x_floats(int64_t k) { return (k + 15) / 16 * 16; }

void prep_i4(const float* x, int64_t k, float* out) {
  for (int64_t c = 0; c < k; c += 16) {
    for (int j = 0; j < 8; ++j) {
      out[c + j] = c + 2 * j < k ? x[c + 2 * j] : 0.0f;
      out[c + 8 + j] = c + 2 * j + 1 < k ? x[c + 2 * j + 1] : 0.0f;
    }
  }
}

// 16 weights (8 bytes) of a row as q: the even-indexed ones in `e`, the odd-indexed in `o`.
inline void nibbles16(const uint8_t* p, __m256i& e, __m256i& o) {
  const __m256i v = _mm256_cvtepu8_epi32(load8(p));
  e = _mm256_srai_epi32(_mm256_slli_epi32(v, 28), 28);
  o = _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 28);
}

template <int MB>
void dot_i4_mb(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  constexpr int R = kRows;
  const int64_t k = f.k, g = f.group;
  __m256 acc[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  for (int64_t g0 = 0; g0 < k; g0 += g) {
    const int64_t gi = g0 / g;
    __m256 s[R], zs[R];  // w = q * s + zs with zs = -z * s
    for (int r = 0; r < R; ++r) {
      const float sc = scale_at(rows[r].scales, gi, f.bf16_scales);
      s[r] = _mm256_set1_ps(sc);
      zs[r] = _mm256_set1_ps(rows[r].zeros ? -static_cast<float>(rows[r].zeros[gi]) * sc : 0.0f);
    }
    for (int64_t kk = g0; kk < g0 + g; kk += 16) {
      __m256 we[R], wo[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = rows[r].data + kk / 2;
        if ((kk & 127) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
        __m256i e, o;
        nibbles16(p, e, o);
        we[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e), s[r], zs[r]);
        wo[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(o), s[r], zs[r]);
      }
      for (int i = 0; i < MB; ++i) {
        const float* xb = x.x + i * x.ldx + kk;
        const __m256 xe = in_register(_mm256_loadu_ps(xb));
        const __m256 xo = in_register(_mm256_loadu_ps(xb + 8));
        for (int r = 0; r < R; ++r) {
          acc[i][r] = _mm256_fmadd_ps(xe, we[r], acc[i][r]);
          acc[i][r] = _mm256_fmadd_ps(xo, wo[r], acc[i][r]);
        }
      }
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) out[i * R + r] = hsum(acc[i][r]);
}

void dot_i4(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (x.mb) {
    case 1: return dot_i4_mb<1>(rows, f, x, out);
    case 2: return dot_i4_mb<2>(rows, f, x, out);
    case 3: return dot_i4_mb<3>(rows, f, x, out);
    default: return dot_i4_mb<4>(rows, f, x, out);
  }
}

// ---- kF8E4M3 ----

// 8 E4M3 bytes -> f32 holding 2^-8 times their values (exact).
inline __m256 fp8x8_to_f32(__m128i b) {
  const __m128i w = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
                                  _mm_set1_epi16(static_cast<int16_t>(0xbf80)));
  return _mm256_cvtph_ps(w);
}

// The first n (< 8) bytes at p, the rest 0, without reading past p + n.
inline __m128i load_partial(const uint8_t* p, int64_t n) {
  uint8_t tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(n));
  return load8(tmp);
}

inline __m256 load_x_partial(const float* p, int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx));
}

template <int MB>
void dot_f8_mb(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  constexpr int R = kRows;
  const int64_t k = f.k;
  __m256 acc[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    __m256 w[2][R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = rows[r].data + kk;
      if ((kk & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      w[0][r] = fp8x8_to_f32(load8(p));
      w[1][r] = fp8x8_to_f32(load8(p + 8));
    }
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < MB; ++i) {
        const __m256 xv = in_register(_mm256_loadu_ps(x.x + i * x.ldx + kk + 8 * h));
        for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, w[h][r], acc[i][r]);
      }
    }
  }
  for (; kk < k; kk += 8) {
    const int64_t n = k - kk < 8 ? k - kk : 8;
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = fp8x8_to_f32(load_partial(rows[r].data + kk, n));
    for (int i = 0; i < MB; ++i) {
      const __m256 xv = load_x_partial(x.x + i * x.ldx + kk, n);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, w[r], acc[i][r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float s = row_scale(rows[r].scales) * 256.0f;
    for (int i = 0; i < MB; ++i) out[i * R + r] = hsum(acc[i][r]) * s;
  }
}

void dot_f8(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (x.mb) {
    case 1: return dot_f8_mb<1>(rows, f, x, out);
    case 2: return dot_f8_mb<2>(rows, f, x, out);
    case 3: return dot_f8_mb<3>(rows, f, x, out);
    default: return dot_f8_mb<4>(rows, f, x, out);
  }
}

// ---- Dequantization of whole rows (prefill) ----

void dequant_f32(const QuantRow& row, const QuantFormat& f, float* out) {
  const int64_t k = f.k;
  if (f.dtype == DType::kF8E4M3) {
    const __m256 s = _mm256_set1_ps(row_scale(row.scales) * 256.0f);
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) _mm256_storeu_ps(out + c, _mm256_mul_ps(fp8x8_to_f32(load8(row.data + c)), s));
    if (c < k) {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, _mm256_mul_ps(fp8x8_to_f32(load_partial(row.data + c, k - c)), s));
      std::memcpy(out + c, tmp, static_cast<size_t>(k - c) * 4);
    }
    return;
  }
  for (int64_t c = 0; c < k; c += 16) {  // k is a multiple of the group, itself of 32
    const int64_t gi = c / f.group;
    const __m256 s = _mm256_set1_ps(scale_at(row.scales, gi, f.bf16_scales));
    const __m256i z = _mm256_set1_epi32(row.zeros ? row.zeros[gi] : 0);
    __m256i e, o;
    nibbles16(row.data + c / 2, e, o);
    const __m256 ef = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(e, z)), s);
    const __m256 of = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(o, z)), s);
    // Interleave: unpack works per 128-bit lane, then put the lanes in order.
    const __m256 a = _mm256_unpacklo_ps(ef, of), b = _mm256_unpackhi_ps(ef, of);
    _mm256_storeu_ps(out + c, _mm256_permute2f128_ps(a, b, 0x20));
    _mm256_storeu_ps(out + c + 8, _mm256_permute2f128_ps(a, b, 0x31));
  }
}

QuantKernels make_table() {
  QuantKernels t;
  t.i4 = {kRows, kMaxM, dot_i4};
  t.f8 = {kRows, kMaxM, dot_f8};
  t.i4_x_floats = i4_x_floats;
  t.prep_i4 = prep_i4;
  t.dequant_f32 = dequant_f32;
  t.dequant_bf16 = nullptr;
  t.epilogue = fma_kernels_avx2().epilogue;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_avx2() {
  static const QuantKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
