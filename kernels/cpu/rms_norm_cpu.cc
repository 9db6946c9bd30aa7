#include "kernels/cpu/rms_norm_cpu.h"

#include "kernels/cpu/isa.h"
#include "kernels/cpu/row_kernels.h"
#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace detail {

void rms_norm_rows_avx2(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w,
                        float eps, float* y, int64_t ldy) {
  rms_norm_rows<Avx2>(rows, dim, x, ldx, w, eps, y, ldy);
}

void add_rms_norm_rows_avx2(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* r,
                            int64_t ldr, const float* w, float eps, float* sum, int64_t lds,
                            float* y, int64_t ldy) {
  add_rms_norm_rows<Avx2>(rows, dim, x, ldx, r, ldr, w, eps, sum, lds, y, ldy);
}

}  // namespace detail

namespace {
// A row is a reduction, so rows are the unit of work; a task gets at least ~16k elements so
// that the pool's hand-off (a few microseconds) stays small next to it.
int64_t row_grain(int64_t dim) { return dim >= 16384 ? 1 : 16384 / (dim > 0 ? dim : 1); }
}  // namespace

void rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w, float eps,
              float* y, int64_t ldy, TaskRunner& runner) {
  if (rows <= 0 || dim <= 0) return;
  const auto kernel =
      has_avx512() ? detail::rms_norm_rows_avx512 : detail::rms_norm_rows_avx2;
  util::parallel_for(runner, rows, row_grain(dim), [&](int64_t r0, int64_t r1) {
    kernel(r1 - r0, dim, x + r0 * ldx, ldx, w, eps, y + r0 * ldy, ldy);
  });
}

void add_rms_norm(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* residual,
                  int64_t ldr, const float* w, float eps, float* sum, int64_t lds, float* y,
                  int64_t ldy, TaskRunner& runner) {
  if (rows <= 0 || dim <= 0) return;
  const auto kernel =
      has_avx512() ? detail::add_rms_norm_rows_avx512 : detail::add_rms_norm_rows_avx2;
  util::parallel_for(runner, rows, row_grain(dim), [&](int64_t r0, int64_t r1) {
    kernel(r1 - r0, dim, x + r0 * ldx, ldx, residual + r0 * ldr, ldr, w, eps, sum + r0 * lds, lds,
           y + r0 * ldy, ldy);
  });
}

}  // namespace sampan::cpu
