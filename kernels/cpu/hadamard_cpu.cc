// Walsh-Hadamard dispatch and the baseline (AVX2) row kernel.
//
// Why block-diagonal for widths that are not a power of two (11008 = 43 x 256, 14336 = 7 x 2048,
// 5632 = 11 x 512) instead of QuaRot's Kronecker H_172 (x) H_64 with a stored H_172: the FWHT is
// exact with no tables for every width, O(n log B), and the same code serves the online transform
// and the offline weight rotation. What the rotation is for is spreading an outlier channel over
// many channels before quantization; a block of B >= 256 channels spreads it over at least 256,
// which already covers every INT4 group (<= 128 channels) that reads it, so the full-width mix of
// a Kronecker product would buy little for the extra table and the O(n * 172) matrix product.
#include "kernels/cpu/hadamard_cpu.h"

#include <cmath>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace detail {

// x: [rows, n] row stride ldx, transformed in place block by block; scale = 1 / sqrt(block).
void hadamard_rows_avx2(int64_t rows, int64_t n, int64_t block, float* x, int64_t ldx,
                        float scale);
void hadamard_rows_avx512(int64_t rows, int64_t n, int64_t block, float* x, int64_t ldx,
                          float scale);

namespace {

// The first three stages (h = 1, 2, 4) as one 8-point transform per group of 8: done in a
// separate pass they would be loops of length 1..4 the compiler cannot vectorise.
void fwht8_groups(float* b, int64_t len) {  // b: [len], len a multiple of 8
  for (int64_t g = 0; g < len; g += 8) {
    float* p = b + g;
    const float a0 = p[0] + p[1], a1 = p[0] - p[1], a2 = p[2] + p[3], a3 = p[2] - p[3];
    const float a4 = p[4] + p[5], a5 = p[4] - p[5], a6 = p[6] + p[7], a7 = p[6] - p[7];
    const float c0 = a0 + a2, c1 = a1 + a3, c2 = a0 - a2, c3 = a1 - a3;
    const float c4 = a4 + a6, c5 = a5 + a7, c6 = a4 - a6, c7 = a5 - a7;
    p[0] = c0 + c4;
    p[1] = c1 + c5;
    p[2] = c2 + c6;
    p[3] = c3 + c7;
    p[4] = c0 - c4;
    p[5] = c1 - c5;
    p[6] = c2 - c6;
    p[7] = c3 - c7;
  }
}

// One block of length `block` (a power of two), unnormalised radix-2 stages; the inner loops over
// j run over contiguous floats and vectorise for h >= 8.
void fwht_block(float* b, int64_t block) {  // b: [block]
  int64_t h = 1;
  if (block >= 8) {
    fwht8_groups(b, block);
    h = 8;
  }
  for (; h < block; h *= 2) {
    for (int64_t i = 0; i < block; i += 2 * h) {
      float* lo = b + i;
      float* hi = b + i + h;
      for (int64_t j = 0; j < h; ++j) {
        const float a = lo[j], c = hi[j];
        lo[j] = a + c;
        hi[j] = a - c;
      }
    }
  }
}

}  // namespace

void hadamard_rows_avx2(int64_t rows, int64_t n, int64_t block, float* x, int64_t ldx,
                        float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ldx;
    for (int64_t b = 0; b < n; b += block) fwht_block(row + b, block);
    if (scale != 1.0f) {
      for (int64_t i = 0; i < n; ++i) row[i] *= scale;
    }
  }
}

}  // namespace detail

void hadamard_rows(int64_t rows, int64_t n, int64_t block, float* x, int64_t ldx,
                   TaskRunner& runner) {
  if (rows <= 0 || n <= 0 || block <= 1) return;  // H_1 = [1]: nothing to do
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
  const auto kernel =
      has_avx512() ? detail::hadamard_rows_avx512 : detail::hadamard_rows_avx2;
  // Rows are independent and a block is the unit of mixing, so rows are the tasks; a task gets at
  // least ~16k floats so the pool's hand-off stays small next to the work.
  const int64_t grain = n >= 16384 ? 1 : 16384 / n;
  util::parallel_for(runner, rows, grain, [&](int64_t r0, int64_t r1) {
    kernel(r1 - r0, n, block, x + r0 * ldx, ldx, scale);
  });
}

}  // namespace sampan::cpu
