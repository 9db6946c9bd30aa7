// AVX-512 instantiation of the RMSNorm row kernels (compiled with AVX-512 flags; only called
// when cpu::has_avx512(): AVX-512 F/BW/VL/DQ).
#include "kernels/cpu/row_kernels.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu::detail {

void rms_norm_rows_avx512(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w,
                          float eps, float* y, int64_t ldy) {
  rms_norm_rows<Avx512>(rows, dim, x, ldx, w, eps, y, ldy);
}

void add_rms_norm_rows_avx512(int64_t rows, int64_t dim, const float* x, int64_t ldx,
                              const float* r, int64_t ldr, const float* w, float eps, float* sum,
                              int64_t lds, float* y, int64_t ldy) {
  add_rms_norm_rows<Avx512>(rows, dim, x, ldx, r, ldr, w, eps, sum, lds, y, ldy);
}

}  // namespace sampan::cpu::detail
