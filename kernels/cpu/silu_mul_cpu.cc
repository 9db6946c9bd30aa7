#include "kernels/cpu/silu_mul_cpu.h"

#include "kernels/cpu/isa.h"
#include "kernels/cpu/row_kernels.h"
#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace detail {

void silu_mul_rows_avx2(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                        int64_t ldu, float* y, int64_t ldy) {
  silu_mul_rows<Avx2>(rows, n, g, ldg, u, ldu, y, ldy);
}

void silu_mul_grad_rows_avx2(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                             int64_t ldu, const float* dy, int64_t lddy, float* dg, int64_t lddg,
                             float* du, int64_t lddu) {
  silu_mul_grad_rows<Avx2>(rows, n, g, ldg, u, ldu, dy, lddy, dg, lddg, du, lddu);
}

}  // namespace detail

namespace {
// Element-wise, so a decode step's single row is split by columns too. Column blocks are a
// multiple of 64 floats (whole cache lines, whole vectors of either width).
constexpr int64_t kMinTaskElems = 8192;
constexpr int64_t kColAlign = 64;
}  // namespace

void silu_mul(int64_t rows, int64_t n, const float* gate, int64_t ldg, const float* up, int64_t ldu,
              float* y, int64_t ldy, TaskRunner& runner) {
  if (rows <= 0 || n <= 0) return;
  const auto kernel =
      has_avx512() ? detail::silu_mul_rows_avx512 : detail::silu_mul_rows_avx2;
  const int64_t workers = runner.concurrency();
  if (rows >= 2 * workers || n < 2 * kMinTaskElems) {
    const int64_t grain = n >= kMinTaskElems ? 1 : kMinTaskElems / n;
    util::parallel_for(runner, rows, grain, [&](int64_t r0, int64_t r1) {
      kernel(r1 - r0, n, gate + r0 * ldg, ldg, up + r0 * ldu, ldu, y + r0 * ldy, ldy);
    });
    return;
  }
  // Few long rows: tasks are (row, column block).
  int64_t blocks = util::ceil_div(2 * workers, rows);
  if (blocks > n / kMinTaskElems) blocks = n / kMinTaskElems;
  const int64_t width = util::ceil_div(util::ceil_div(n, blocks), kColAlign) * kColAlign;
  blocks = util::ceil_div(n, width);
  util::parallel_for(runner, rows * blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / blocks, c0 = (t % blocks) * width;
      const int64_t cols = n - c0 < width ? n - c0 : width;
      kernel(1, cols, gate + r * ldg + c0, ldg, up + r * ldu + c0, ldu, y + r * ldy + c0, ldy);
    }
  });
}

}  // namespace sampan::cpu
