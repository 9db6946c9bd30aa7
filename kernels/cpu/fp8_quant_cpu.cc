// FP8 E4M3 row quantization (fp8_quant_cpu.h) on AVX2, 8 values at a time, with the integer
// rounding of quant/quantize.cc's scalar encoder: normal values round their mantissa to 3 bits
// by adding 0x7ffff plus the kept bit's lowest (ties to even) to the f32 bits; values below
// 2^-6 take nearbyint(|v| * 2^9) (exact scaling, then vroundps); from 448 up, and what rounds
// past it, 0x7e. The scalar loop ran at 360 M weights/s on a Zen 5 core.
#include "kernels/cpu/fp8_quant_cpu.h"

#include <immintrin.h>

#include <cstring>

namespace sampan::cpu {
namespace {

// The 8 codes of x[0 .. 8) / scale as bytes at out.
inline void encode8(const float* x, __m256 scale, uint8_t* out) {
  const __m256 v = _mm256_div_ps(_mm256_loadu_ps(x), scale);
  const __m256i u = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i b = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256 a = _mm256_castsi256_ps(b);
  // Normal: round the mantissa to 3 bits (ties to even), rebias the exponent 127 -> 7.
  const __m256i t = _mm256_add_epi32(
      b, _mm256_add_epi32(_mm256_set1_epi32(0x7ffff),
                          _mm256_and_si256(_mm256_srli_epi32(b, 20), _mm256_set1_epi32(1))));
  __m256i code = _mm256_or_si256(
      _mm256_slli_epi32(_mm256_sub_epi32(_mm256_srli_epi32(t, 23), _mm256_set1_epi32(120)), 3),
      _mm256_and_si256(_mm256_srli_epi32(t, 20), _mm256_set1_epi32(7)));
  code = _mm256_min_epi32(code, _mm256_set1_epi32(0x7e));
  // Below 2^-6: the count of 2^-9 (0 .. 8); its lanes' normal-path code is garbage.
  const __m256i sub = _mm256_cvtps_epi32(_mm256_round_ps(
      _mm256_mul_ps(a, _mm256_set1_ps(0x1p9f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  code = _mm256_blendv_epi8(code, sub,
                            _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ)));
  code = _mm256_blendv_epi8(
      code, _mm256_set1_epi32(0x7e),
      _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(448.0f), _CMP_GE_OQ)));
  code = _mm256_or_si256(code, sign);
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}

}  // namespace

bool fp8_row_absmax(const float* x, int64_t k, float* amax) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    m = _mm256_max_ps(m, _mm256_and_ps(v, abs_mask));
    const __m256 d = _mm256_sub_ps(v, v);  // 0, or NaN for an infinity or a NaN
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(bad) != 0) return false;
  alignas(32) float l[8];
  _mm256_store_ps(l, m);
  float r = 0.0f;
  for (float v : l) r = v > r ? v : r;
  for (; c < k; ++c) {
    const float v = x[c];
    if (v - v != 0.0f) return false;
    const float a = v < 0 ? -v : v;
    r = a > r ? a : r;
  }
  *amax = r;
  return true;
}

void fp8_encode_row(const float* x, int64_t k, float scale, uint8_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) encode8(x + c, s, out + c);
  if (c < k) {  // the tail through a zero-padded copy
    float t[8] = {};
    uint8_t o[8];
    std::memcpy(t, x + c, static_cast<size_t>(k - c) * 4);
    encode8(t, s, o);
    std::memcpy(out + c, o, static_cast<size_t>(k - c));
  }
}

}  // namespace sampan::cpu
