#include "kernels/cpu/convert_cpu.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/common/half.h"
#include "kernels/cpu/isa.h"

// Every path is bit-exact with the scalar converters of kernels/common/half.h, which also
// handle the tails. bf16 rounding is done with integer arithmetic rather than vcvtneps2bf16,
// because that instruction flushes f32 subnormals to zero. F16C's vcvtps2ph rounds exactly
// like f32_to_f16 except for NaN payloads, so 8-element groups holding a NaN go to the scalar
// path (NaN is rare in real tensors, so this costs nothing).
namespace sampan::cpu {
namespace detail {

void convert_f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n);
void convert_f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n);
void convert_bf16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n);
void convert_f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n);

}  // namespace detail

namespace {

// Round-to-nearest-even of the top 16 bits, NaN quietened: 8 lanes of f32 bits in, 8 u32 out.
inline __m256i bf16_round8(__m256i u) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  // abs > 0x7f800000 as signed compare is safe: abs is non-negative.
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

void f32_to_bf16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b =
        bf16_round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works within 128-bit halves: [a0-3 b0-3 a4-7 b4-7] -> reorder the 64-bit quarters.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (int j = 0; j < 8; ++j) dst[i + j] = f32_to_f16(src[i + j]);
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void bf16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

// vcvtph2ps is exact for every finite value and infinity; it quietens signalling NaNs, which
// the scalar converter keeps as they are.
void f16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

bool use_avx512() { return has_avx512(); }

}  // namespace

void convert_to_f32(DType src_type, const void* src, float* dst, int64_t n) {
  if (n <= 0) return;
  const auto* h = static_cast<const uint16_t*>(src);
  switch (src_type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      if (use_avx512()) {
        detail::convert_f16_to_f32_avx512(h, dst, n);
      } else {
        f16_to_f32_avx2(h, dst, n);
      }
      return;
    case DType::kBF16:
      if (use_avx512()) {
        detail::convert_bf16_to_f32_avx512(h, dst, n);
      } else {
        bf16_to_f32_avx2(h, dst, n);
      }
      return;
    case DType::kF8E4M3:
    case DType::kI8:
    case DType::kI4:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kBool:
      // Not a float format this kernel handles; callers check the type before calling. Kernels
      // do not throw, so the output is filled with NaN to make the misuse visible downstream.
      for (int64_t i = 0; i < n; ++i) dst[i] = __builtin_nanf("");
      return;
  }
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (n <= 0) return;
  if (use_avx512()) {
    detail::convert_f32_to_bf16_avx512(src, dst, n);
  } else {
    f32_to_bf16_avx2(src, dst, n);
  }
}

void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  if (n <= 0) return;
  if (use_avx512()) {
    detail::convert_f32_to_f16_avx512(src, dst, n);
  } else {
    f32_to_f16_avx2(src, dst, n);
  }
}

}  // namespace sampan::cpu
