// The f32 kernels for GEMMs with one tiny dimension (kernels/cpu/skinny_gemm_cpu.h) and the
// three entry points that route LoRA's shapes to them (gemm with <= 16 output columns,
// linear_grad_input with <= 16 input columns, linear_grad_weight with <= 16 rows or columns),
// against double sums: every width 1..16 (the 4-wide tiles and their 1-3 remainders), lengths
// with a partial last vector, odd row counts, strides past the widths, serial and threaded.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/linear_grad_cpu.h"
#include "kernels/cpu/skinny_gemm_cpu.h"

using namespace sampan;

namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// |got - want| <= 1e-5 * (sum of |terms| + 1e-3): the f32 bound of sums of up to a few hundred
// terms with room; a wrong index or a dropped tail is off by a whole term.
void check_close(double got, double want, double abs_sum) {
  INFO("got " << got << " want " << want);
  CHECK(std::abs(got - want) <= 1e-5 * (abs_sum + 1e-3));
}

// out[a, b] (+ start when accumulating) against Σ_i p[i, a] q[i, b] in double, for p [m, rows]
// (row stride ldp) and q [m, cols] (ldq); out and start [rows, cols] with row stride ldo.
void check_outer_sum(const std::vector<float>& out, const std::vector<float>& start, int64_t ldo,
                     bool accumulate, int64_t m, const std::vector<float>& p, int64_t ldp,
                     int64_t rows, const std::vector<float>& q, int64_t ldq, int64_t cols) {
  for (int64_t a = 0; a < rows; ++a) {
    for (int64_t b = 0; b < cols; ++b) {
      double sum = accumulate ? start[a * ldo + b] : 0.0, ab = std::abs(sum);
      for (int64_t i = 0; i < m; ++i) {
        sum += static_cast<double>(p[i * ldp + a]) * q[i * ldq + b];
        ab += std::abs(static_cast<double>(p[i * ldp + a]) * q[i * ldq + b]);
      }
      check_close(out[a * ldo + b], sum, ab);
    }
  }
}

}  // namespace

TEST_CASE("skinny_n_gemm: x · Wᵀ (+ bias) for 1..16 output columns", "[skinny]") {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  cpu::SerialRunner serial;
  for (cpu::TaskRunner* runner : {static_cast<cpu::TaskRunner*>(&serial),
                                  static_cast<cpu::TaskRunner*>(&pool)}) {
    for (int64_t n = 1; n <= cpu::kSkinnyMax; ++n) {
      for (int64_t k : {1, 7, 8, 19, 131}) {
        const int64_t m = 5 + n % 4 * 6;  // odd and even row counts
        const int64_t ldx = k + 3, ldw = k + 1, ldy = n + 2;
        const auto x = random_vec(m * ldx, rng), w = random_vec(n * ldw, rng);
        const auto bias = random_vec(n, rng);
        const bool with_bias = n % 2 == 0;
        std::vector<float> y(m * ldy, 777.0f);
        cpu::skinny_n_gemm(m, n, k, x.data(), ldx, w.data(), ldw, with_bias ? bias.data() : nullptr,
                           y.data(), ldy, *runner);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double s = with_bias ? bias[j] : 0.0, a = with_bias ? std::abs(bias[j]) : 0.0;
            for (int64_t c = 0; c < k; ++c) {
              s += static_cast<double>(x[i * ldx + c]) * w[j * ldw + c];
              a += std::abs(static_cast<double>(x[i * ldx + c]) * w[j * ldw + c]);
            }
            INFO("n " << n << " k " << k << " row " << i << " col " << j);
            check_close(y[i * ldy + j], s, a);
          }
          for (int64_t j = n; j < ldy; ++j) CHECK(y[i * ldy + j] == 777.0f);  // padding untouched
        }
      }
    }
  }
}

TEST_CASE("skinny_outer_sum: gᵀ · x over the rows, overwrite and accumulate", "[skinny]") {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  for (int64_t n = 1; n <= cpu::kSkinnyMax; ++n) {
    for (int64_t k : {1, 5, 24, 25, 100}) {  // one partial tile, whole tiles, a tile and one
      for (bool accumulate : {false, true}) {
        const int64_t m = 3 + n;
        const int64_t ldg = n + 2, ldx = k + 5, ldo = k + 1;
        const auto g = random_vec(m * ldg, rng), x = random_vec(m * ldx, rng);
        const auto start = random_vec(n * ldo, rng);
        std::vector<float> out = start;
        cpu::skinny_outer_sum(m, n, k, g.data(), ldg, x.data(), ldx, out.data(), ldo, accumulate,
                              pool);
        INFO("n " << n << " k " << k << " accumulate " << accumulate);
        check_outer_sum(out, start, ldo, accumulate, m, g, ldg, n, x, ldx, k);
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c = k; c < ldo; ++c) CHECK(out[r * ldo + c] == start[r * ldo + c]);
        }
      }
    }
  }
  // No rows: the sum is zero (or the previous contents when accumulating).
  std::vector<float> out(6, 5.0f);
  cpu::skinny_outer_sum(0, 2, 3, nullptr, 2, nullptr, 3, out.data(), 3, true, pool);
  CHECK(out[4] == 5.0f);
  cpu::skinny_outer_sum(0, 2, 3, nullptr, 2, nullptr, 3, out.data(), 3, false, pool);
  CHECK(out[4] == 0.0f);
}

TEST_CASE("LoRA shapes through gemm, linear_grad_input and linear_grad_weight", "[skinny]") {
  // The entry points the training graph calls: y = x · Aᵀ (A [r, in], two blocks as a fused
  // linear would pass), dx = dy · B (B [out, r] in two blocks), dA = dyᵀ · x and dB = dyᵀ · u
  // with and without accumulation. m = 40 is past the panel threshold where gemm would
  // otherwise take the panels.
  std::mt19937 rng(13);
  ThreadPool pool(2);
  const int64_t m = 40, r = 8, in = 77, out = 50;
  const auto x = random_vec(m * in, rng), a = random_vec(2 * r * in, rng);
  const auto bias = random_vec(2 * r, rng);
  GemmWeights wa;
  wa.dtype = DType::kF32;
  wa.k = in;
  wa.n_blocks = 2;
  for (int b = 0; b < 2; ++b) {
    wa.data[b] = a.data() + b * r * in;
    wa.rows[b] = r;
    wa.bias[b] = bias.data() + b * r;
  }
  std::vector<float> y(m * 2 * r);
  cpu::gemm(m, x.data(), in, wa, GemmEpilogue::kStore, y.data(), 2 * r, pool);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < 2 * r; ++j) {
      double s = bias[j], ab = std::abs(s);
      for (int64_t c = 0; c < in; ++c) {
        s += static_cast<double>(x[i * in + c]) * a[j * in + c];
        ab += std::abs(static_cast<double>(x[i * in + c]) * a[j * in + c]);
      }
      check_close(y[i * 2 * r + j], s, ab);
    }
  }

  const auto dy = random_vec(m * out, rng), bmat = random_vec(out * r, rng);
  GemmWeights wb;
  wb.dtype = DType::kF32;
  wb.k = r;
  wb.n_blocks = 2;
  wb.data[0] = bmat.data();
  wb.rows[0] = 20;
  wb.data[1] = bmat.data() + 20 * r;
  wb.rows[1] = out - 20;
  const int64_t lddx = r + 3;
  std::vector<float> dx(m * lddx, 99.0f);
  cpu::linear_grad_input(m, dy.data(), out, wb, dx.data(), lddx, pool);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < r; ++c) {
      double s = 0, ab = 0;
      for (int64_t o = 0; o < out; ++o) {
        s += static_cast<double>(dy[i * out + o]) * bmat[o * r + c];
        ab += std::abs(static_cast<double>(dy[i * out + o]) * bmat[o * r + c]);
      }
      check_close(dx[i * lddx + c], s, ab);
    }
    for (int64_t c = r; c < lddx; ++c) CHECK(dx[i * lddx + c] == 99.0f);
  }

  // dA [r, in] = gᵀ x with g [m, r]; dB [out, r] = dyᵀ u with u [m, r].
  const auto g = random_vec(m * r, rng), u = random_vec(m * r, rng);
  for (bool accumulate : {false, true}) {
    const auto da0 = random_vec(r * in, rng), db0 = random_vec(out * r, rng);
    std::vector<float> da = da0, db = db0;
    cpu::linear_grad_weight(m, r, in, g.data(), r, x.data(), in, da.data(), accumulate, pool);
    cpu::linear_grad_weight(m, out, r, dy.data(), out, u.data(), r, db.data(), accumulate, pool);
    check_outer_sum(da, da0, in, accumulate, m, g, r, r, x, in, in);
    check_outer_sum(db, db0, r, accumulate, m, dy, out, out, u, r, r);
  }
}
