// The Winograd conv's stages on AVX-512, block 16 (conv_winograd_stages.h): register tiles of
// up to 14 tiles x 2 output blocks = 28 zmm accumulators, 2 weight vectors and a broadcast.
// GCC 12's _mm512_undefined_ps (inside max/min) trips -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/cpu/conv_epilogue_avx512.h"
#include "kernels/cpu/conv_winograd_stages.h"

namespace sampan::cpu::winograd_detail {
namespace {

struct Zmm {
  using T = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kTileRows = 14;
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float f) { return _mm512_set1_ps(f); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T activate(T v, const ConvEpilogue& ep) { return conv_detail::activate_avx512(v, ep); }
};

}  // namespace

Stages stages_avx512() {
  return {Zmm::kLanes, Zmm::kTileRows, &input_transform<Zmm>, &gemm_output<Zmm>};
}

}  // namespace sampan::cpu::winograd_detail
