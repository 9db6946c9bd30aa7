// Pieces shared by the AVX2 quantized-weight kernels (gemm_quant_avx2.cc, the one-row decode
// kernels, and gemm_quant_batch_avx2.cc, the batched ones): the kI4 rounding of x per weight
// group and the horizontal sum. The batched int4 kernel promises results bit for
// bit equal to the one-row kernel's (the same x16, the same integer group sums, the same f32
// operations in the same order), which holds only while both use these definitions.
// Include only from files compiled with AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu::gemm_detail::avx2q {

inline float hsum(__m256 v) { return Avx2::reduce_add(v); }

// Weights per kI4 step of the AVX2 kernels: a group, but at least 64 (one 32-byte load).
constexpr int64_t i4_step(int64_t group) { return group < 64 ? 64 : group; }

struct XScale {
  float sx = 0.0f;   // x = sx * x16
  float inv = 0.0f;  // x16 = round(x * inv)
};

// Scale of x[c0, c0 + n) (n a multiple of 8). A group with a NaN or an infinity gets sx = NaN and
// x16 = 0, so that its outputs come out NaN as with f32 arithmetic.
inline XScale group_scale(const float* x, int64_t c0, int64_t n) {
  const AbsMax a = absmax_avx2(x + c0, n);
  XScale s;
  if (!a.finite) {
    s.sx = std::numeric_limits<float>::quiet_NaN();
  } else if (a.value > 0.0f) {
    s.sx = a.value / kI4XMax;
    s.inv = kI4XMax / a.value;
  }
  return s;
}

// x16 of x[c, c + 8) (zeros from k on; k is a multiple of 32), as int32 lanes.
inline __m256i quantize8(const float* x, int64_t c, int64_t k, __m256 inv) {
  if (c >= k) return _mm256_setzero_si256();
  const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + c), inv);
  return _mm256_cvtps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace sampan::cpu::gemm_detail::avx2q
