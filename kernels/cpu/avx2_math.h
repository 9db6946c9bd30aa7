// exp, sigmoid, erf, tanh and GELU on 8 f32 lanes (AVX2, the CPU baseline), shared by the
// element-wise kernels (unary_cpu.cc) and the fused bias + activation epilogue of the matmuls
// (binary_cpu.cc), so that a fused GELU gives the same bits as the unfused Gelu op;
// avx512_math.h runs the same operations on 16 lanes (vec_math_impl.h over vec_avx2.h's Avx2 /
// vec_avx512.h's Avx512), bit for bit.
// exp: range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial; erf: N. Juffa's
// two-interval minimax form (erf(x) = x P(x^2) near 0, 1 - exp(t Q(t)) beyond), within 2e-7
// absolute; tanh: its Taylor series near 0 (where 1 - 2 / (e^2x + 1) cancels) and exp beyond.
// Include only from files built with the baseline flags (AVX2 and FMA); internal linkage, as
// vec_avx2.h's.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_math_impl.h"

namespace sampan::cpu::avx2_math {
namespace {

inline __m256 exp8(__m256 x) { return vec_math::exp<Avx2>(x); }
inline __m256 sign_bit() { return _mm256_set1_ps(-0.0f); }
inline __m256 abs8(__m256 x) { return Avx2::abs(x); }
inline __m256 sigmoid8(__m256 x) { return vec_math::sigmoid<Avx2>(x); }
inline __m256 erf8(__m256 a) { return vec_math::erf<Avx2>(a); }
inline __m256 tanh8(__m256 x) { return vec_math::tanh<Avx2>(x); }
inline __m256 gelu8(__m256 x) { return vec_math::gelu<Avx2>(x); }
inline __m256 gelu_tanh8(__m256 x) { return vec_math::gelu_tanh<Avx2>(x); }

}  // namespace
}  // namespace sampan::cpu::avx2_math
