// AVX-512 instantiation of the SwiGLU row kernel: the vector exp dominates, and 16 lanes halve
// its cost.
#include "kernels/cpu/row_kernels.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu::detail {

void silu_mul_rows_avx512(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                          int64_t ldu, float* y, int64_t ldy) {
  silu_mul_rows<Avx512>(rows, n, g, ldg, u, ldu, y, ldy);
}

void silu_mul_grad_rows_avx512(int64_t rows, int64_t n, const float* g, int64_t ldg,
                               const float* u, int64_t ldu, const float* dy, int64_t lddy,
                               float* dg, int64_t lddg, float* du, int64_t lddu) {
  silu_mul_grad_rows<Avx512>(rows, n, g, ldg, u, ldu, dy, lddy, dg, lddg, du, lddu);
}

}  // namespace sampan::cpu::detail
