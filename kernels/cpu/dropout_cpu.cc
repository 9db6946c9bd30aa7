#include "kernels/cpu/dropout_cpu.h"

#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {

bool dropout_keep(uint64_t seed, uint64_t index, double p) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1p-53;  // uniform in [0, 1)
  return u >= p;
}

template <class T>
void scaled_dropout(int64_t rows, int64_t cols, const T* x, int64_t ldx, uint64_t seed, double p,
                    double scale, T* y, int64_t ldy, TaskRunner& runner) {
  const T kept = static_cast<T>(scale / (1.0 - p));
  util::parallel_for(runner, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const bool keep = p <= 0 || dropout_keep(seed, static_cast<uint64_t>(r * cols + c), p);
        y[r * ldy + c] = keep ? x[r * ldx + c] * kept : T(0);
      }
    }
  });
}

template void scaled_dropout<float>(int64_t, int64_t, const float*, int64_t, uint64_t, double,
                                    double, float*, int64_t, TaskRunner&);
template void scaled_dropout<double>(int64_t, int64_t, const double*, int64_t, uint64_t, double,
                                     double, double*, int64_t, TaskRunner&);

}  // namespace sampan::cpu
