// The Winograd conv's stages on AVX2 + FMA, block 8 (conv_winograd_stages.h): register tiles of
// up to 6 tiles x 2 output blocks = 12 ymm accumulators, 2 weight vectors and a broadcast of the
// 16 registers; a task's 12 tiles are two such tiles sharing the weights through L1.
#include <immintrin.h>

#include "kernels/cpu/conv_winograd_stages.h"

namespace sampan::cpu::winograd_detail {
namespace {

struct Ymm {
  using T = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kTileRows = 6;
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float f) { return _mm256_set1_ps(f); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T activate(T v, const ConvEpilogue& ep) {
    switch (ep.act) {
      case ConvActivation::kNone:
      case ConvActivation::kSigmoid:  // after the store
        return v;
      case ConvActivation::kRelu: return _mm256_max_ps(v, _mm256_setzero_ps());
      case ConvActivation::kClip:
        return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.act_min)),
                             _mm256_set1_ps(ep.act_max));
      case ConvActivation::kHardSwish: {
        const T g = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
        const T c = _mm256_min_ps(_mm256_max_ps(g, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
        return _mm256_mul_ps(v, c);
      }
    }
    return v;
  }
};

}  // namespace

Stages stages_avx2() {
  return {Ymm::kLanes, 2 * Ymm::kTileRows, &input_transform<Ymm>, &gemm_output<Ymm>};
}

}  // namespace sampan::cpu::winograd_detail
