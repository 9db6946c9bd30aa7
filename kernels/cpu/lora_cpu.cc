#include "kernels/cpu/lora_cpu.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"

namespace sampan::cpu {

void lora_apply(int64_t n_tokens, int64_t in, int64_t out, int64_t n_adapters, int64_t r_max,
                const float* y, int64_t ldy, const float* x, int64_t ldx, const int32_t* ids,
                const float* a, const float* b, const float* scale, float* y_out, int64_t ldo,
                TaskRunner& runner) {
  const size_t row_bytes = static_cast<size_t>(out) * sizeof(float);
  if (y_out != y) {
    for (int64_t t = 0; t < n_tokens; ++t) std::memcpy(y_out + t * ldo, y + t * ldy, row_bytes);
  }
  // Tokens of one adapter are gathered into contiguous rows so each adapter is two GEMMs over
  // all its tokens, whatever order the batch interleaves them in.
  std::vector<int64_t> rows;
  std::vector<float> xg, h, d;
  for (int64_t k = 0; k < n_adapters; ++k) {
    if (scale[k] == 0.0f) continue;
    rows.clear();
    for (int64_t t = 0; t < n_tokens; ++t) {
      if (ids[t] == k) rows.push_back(t);
    }
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    const float* xk = x + rows[0] * ldx;
    int64_t ldxk = ldx;
    // A run of consecutive tokens (one sequence's prefill, or a single adapter) is read in place.
    if (rows.back() - rows.front() + 1 != m) {
      xg.resize(static_cast<size_t>(m * in));
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(xg.data() + i * in, x + rows[static_cast<size_t>(i)] * ldx,
                    static_cast<size_t>(in) * sizeof(float));
      }
      xk = xg.data();
      ldxk = in;
    }
    h.resize(static_cast<size_t>(m * r_max));
    d.resize(static_cast<size_t>(m * out));
    GemmWeights wa;
    wa.dtype = DType::kF32;
    wa.k = in;
    wa.n_blocks = 1;
    wa.data[0] = a + k * r_max * in;
    wa.rows[0] = r_max;
    gemm(m, xk, ldxk, wa, GemmEpilogue::kStore, h.data(), r_max, runner);
    // The scale goes on the [m, r] intermediate: the cheapest place to apply it.
    for (float& v : h) v *= scale[k];
    GemmWeights wb;
    wb.dtype = DType::kF32;
    wb.k = r_max;
    wb.n_blocks = 1;
    wb.data[0] = b + k * out * r_max;
    wb.rows[0] = out;
    gemm(m, h.data(), r_max, wb, GemmEpilogue::kStore, d.data(), out, runner);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = y_out + rows[static_cast<size_t>(i)] * ldo;
      const float* src = d.data() + i * out;
      for (int64_t j = 0; j < out; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace sampan::cpu
