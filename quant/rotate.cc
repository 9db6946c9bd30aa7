// Conventions: a linear computes y = x·Wᵀ + b with W [out, in]. A transform on the input side of
// W (W·M) is a transform of W's rows; one on the output side (Mᵀ·W) is the same transform down
// W's columns. Every transform is the FWHT kernel's (symmetric, its own inverse), so a 1B model
// rotates in seconds, dominated by the conversion to f32 and memory traffic.
#include "quant/rotate.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/hadamard_cpu.h"

namespace sampan::quant {
namespace {

// Calls fn(begin, end) over [0, n) in chunks spread over the runner (a few per worker so uneven
// chunks still balance). fn runs inside runner tasks, so it must not use the runner itself.
template <class Fn>
void for_chunks(cpu::TaskRunner& runner, int64_t n, const Fn& fn) {
  if (n <= 0) return;
  const int64_t n_chunks = std::min<int64_t>(n, 4 * static_cast<int64_t>(runner.concurrency()));
  const int64_t chunk = (n + n_chunks - 1) / n_chunks;
  runner.run((n + chunk - 1) / chunk, [&](int64_t c) {
    const int64_t begin = c * chunk;
    fn(begin, std::min(n, begin + chunk));
  });
}

}  // namespace

void convert_to_f32(DType dtype, const void* src, float* dst, int64_t n, cpu::TaskRunner& runner) {
  const size_t esize = dtype == DType::kF32 ? 4 : 2;
  const char* s = static_cast<const char*>(src);
  // Converted in slices of 64k elements so that a large matrix uses every core.
  constexpr int64_t kSlice = 1 << 16;
  for_chunks(runner, (n + kSlice - 1) / kSlice, [&](int64_t c0, int64_t c1) {
    const int64_t begin = c0 * kSlice, end = std::min(n, c1 * kSlice);
    cpu::convert_to_f32(dtype, s + static_cast<size_t>(begin) * esize, dst + begin, end - begin);
  });
}

void hadamard_rows_scaled(float* m, int64_t rows, int64_t n, const float* col_scale,
                          int64_t block, cpu::TaskRunner& runner) {
  for_chunks(runner, rows, [&](int64_t r0, int64_t r1) {
    cpu::SerialRunner serial;
    for (int64_t r = r0; r < r1; ++r) {
      float* row = m + r * n;
      if (col_scale != nullptr) {
        for (int64_t j = 0; j < n; ++j) row[j] *= col_scale[j];
      }
      // Row by row (not one call per chunk) so the scaled row is still in cache.
      cpu::hadamard_rows(1, n, block, row, n, serial);
    }
  });
}

// Strips of 16 columns (one cache line per row) are gathered into rows of a buffer, transformed
// by the row kernel and scattered back.
void hadamard_columns_scaled(float* m, int64_t rows, int64_t cols, const float* row_scale,
                             int64_t block, cpu::TaskRunner& runner) {
  if (block <= 1 && row_scale == nullptr) return;  // H_1: nothing to do
  constexpr int64_t kStrip = 16;
  const int64_t n_strips = (cols + kStrip - 1) / kStrip;
  for_chunks(runner, n_strips, [&](int64_t s0, int64_t s1) {
    cpu::SerialRunner serial;
    std::vector<float> buf(static_cast<size_t>(kStrip * rows));  // [kStrip, rows]
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t c0 = s * kStrip, w = std::min(kStrip, cols - c0);
      for (int64_t r = 0; r < rows; ++r) {
        const float f = row_scale != nullptr ? row_scale[r] : 1.0f;
        const float* src = m + r * cols + c0;
        for (int64_t c = 0; c < w; ++c) buf[static_cast<size_t>(c * rows + r)] = src[c] * f;
      }
      cpu::hadamard_rows(w, rows, block, buf.data(), rows, serial);
      for (int64_t r = 0; r < rows; ++r) {
        float* dst = m + r * cols + c0;
        for (int64_t c = 0; c < w; ++c) dst[c] = buf[static_cast<size_t>(c * rows + r)];
      }
    }
  });
}

}  // namespace sampan::quant
