#include "kernels/cpu/dropout_cpu.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {

namespace {

// splitmix64 of (seed, index): 53 uniform bits.
inline uint64_t mix53(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z >> 11;
}

// u = bits * 2^-53 >= p  <=>  bits >= p * 2^53 (both sides exact in double)  <=>  bits >= the
// smallest integer not below p * 2^53. So the integer test keeps exactly the elements the
// floating-point one does, without a conversion per element.
inline uint64_t keep_threshold(double p) {
  const double t = std::ceil(p * 0x1p53);
  return t <= 0 ? 0 : static_cast<uint64_t>(t);
}

}  // namespace

bool dropout_keep(uint64_t seed, uint64_t index, double p) {
  return mix53(seed, index) >= keep_threshold(p);
}

template <class T>
void scaled_dropout(int64_t rows, int64_t cols, const T* x, int64_t ldx, uint64_t seed, double p,
                    double scale, T* y, int64_t ldy, TaskRunner& runner) {
  const T kept = static_cast<T>(scale / (1.0 - p));
  const uint64_t threshold = keep_threshold(p);
  const bool vec = std::is_same_v<T, float> && has_avx512();
  util::parallel_for(runner, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint64_t base = static_cast<uint64_t>(r * cols);
      const T* xr = x + r * ldx;
      T* yr = y + r * ldy;
      if constexpr (std::is_same_v<T, float>) {
        if (vec) {
          detail::dropout_row_f32_avx512(xr, yr, cols, seed, base, threshold, kept);
          continue;
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        const bool keep = mix53(seed, base + static_cast<uint64_t>(c)) >= threshold;
        yr[c] = keep ? xr[c] * kept : T(0);
      }
    }
  });
}

template void scaled_dropout<float>(int64_t, int64_t, const float*, int64_t, uint64_t, double,
                                    double, float*, int64_t, TaskRunner&);
template void scaled_dropout<double>(int64_t, int64_t, const double*, int64_t, uint64_t, double,
                                     double, double*, int64_t, TaskRunner&);

}  // namespace sampan::cpu
