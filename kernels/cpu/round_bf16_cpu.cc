#include "kernels/cpu/round_bf16_cpu.h"

#include "kernels/common/half.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {

void round_bf16(int64_t rows, int64_t cols, const float* x, int64_t ldx, float* y, int64_t ldy,
                TaskRunner& runner) {
  util::parallel_for(runner, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) y[r * ldy + c] = bf16_to_f32(f32_to_bf16(x[r * ldx + c]));
    }
  });
}

}  // namespace sampan::cpu
