// exp, sigmoid, erf, tanh and GELU on 16 f32 lanes: the operations of avx2_math.h in the same
// order (vec_math_impl.h over vec_avx512.h's Avx512), so every lane gives avx2_math.h's bits.
// Include only from files built for AVX-512 (*_avx512.cc and above); internal linkage, as
// vec_avx512.h's.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/vec_avx512.h"
#include "kernels/cpu/vec_math_impl.h"

namespace sampan::cpu::avx512_math {
namespace {

inline __m512 exp16(__m512 x) { return vec_math::exp<Avx512>(x); }
inline __m512 sigmoid16(__m512 x) { return vec_math::sigmoid<Avx512>(x); }
inline __m512 erf16(__m512 a) { return vec_math::erf<Avx512>(a); }
inline __m512 tanh16(__m512 x) { return vec_math::tanh<Avx512>(x); }
inline __m512 gelu16(__m512 x) { return vec_math::gelu<Avx512>(x); }
inline __m512 gelu_tanh16(__m512 x) { return vec_math::gelu_tanh<Avx512>(x); }

}  // namespace
}  // namespace sampan::cpu::avx512_math
