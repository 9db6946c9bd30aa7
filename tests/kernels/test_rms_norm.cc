// rms_norm and add_rms_norm against a plain double-precision reference; the float
// rms_norm_backward against the double one.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/rms_norm_cpu.h"
#include "kernels/cpu/rms_norm_grad_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

std::vector<float> random_vec(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// y = x / sqrt(mean(x^2) + eps) * w, all in double.
std::vector<double> reference(int64_t rows, int64_t dim, const float* x, int64_t ldx,
                              const float* w, float eps) {
  std::vector<double> y(static_cast<size_t>(rows * dim));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * ldx + i]) * x[r * ldx + i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) y[size_t(r * dim + i)] = x[r * ldx + i] * inv * w[i];
  }
  return y;
}

// The kernel's result passes through an f32 mean, an f32 rsqrt and two f32 products, a few
// roundings of 6e-8 each (measured worst case 2.4e-7 relative). 1e-6 relative keeps a 4x margin
// and still catches a wrong eps, mean or weight, which are off by far more.
constexpr double kRelTol = 1e-6;

int64_t count_bad(int64_t rows, int64_t dim, const std::vector<double>& want, const float* y,
                  int64_t ldy) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const double w = want[size_t(r * dim + i)];
      const double got = y[r * ldy + i];
      if (!(std::fabs(got - w) <= kRelTol * std::fabs(w) + 1e-30)) {
        if (bad++ == 0) UNSCOPED_INFO("row " << r << " col " << i << ": " << got << " want " << w);
      }
    }
  }
  return bad;
}

TEST_CASE("rms_norm matches the double reference", "[kernels][rms_norm]") {
  std::mt19937 rng(7);
  Runners runners;
  IsaRestore restore;
  // 20000 > 8192 checks that long rows keep their accuracy.
  for (int64_t dim : {1, 7, 64, 769, 5125, 20000}) {
    for (int64_t rows : {1, 3, 17}) {
      const int64_t ldx = dim + 5, ldy = dim + 3;
      // Exact sizes: the last row ends at its last element, so an overrun is caught by ASan.
      std::vector<float> x = random_vec(rng, (rows - 1) * ldx + dim, -3.0f, 3.0f);
      const std::vector<float> w = random_vec(rng, dim, 0.5f, 1.5f);
      const float eps = 1e-6f;
      const std::vector<double> want = reference(rows, dim, x.data(), ldx, w.data(), eps);
      for (Isa isa : supported_isas()) {
        REQUIRE(set_isa(isa));
        for (auto [name, runner] : runners.all()) {
          INFO("dim " << dim << " rows " << rows << " isa " << isa_name(isa) << " runner " << name);
          std::vector<float> y((rows - 1) * ldy + dim);
          rms_norm(rows, dim, x.data(), ldx, w.data(), eps, y.data(), ldy, *runner);
          CHECK(count_bad(rows, dim, want, y.data(), ldy) == 0);
          // In place (y == x, same stride).
          std::vector<float> inplace = x;
          rms_norm(rows, dim, inplace.data(), ldx, w.data(), eps, inplace.data(), ldx, *runner);
          CHECK(count_bad(rows, dim, want, inplace.data(), ldx) == 0);
        }
      }
    }
  }
}

TEST_CASE("rms_norm: eps matters for small rows, large values stay finite", "[kernels][rms_norm]") {
  std::mt19937 rng(8);
  SerialRunner serial;
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    INFO("isa " << isa_name(isa));
    for (float scale : {1e-3f, 1e15f}) {
      const int64_t dim = 769;
      std::vector<float> x = random_vec(rng, dim, -scale, scale);
      const std::vector<float> w = random_vec(rng, dim, -2.0f, 2.0f);
      const float eps = 1e-5f;
      const std::vector<double> want = reference(1, dim, x.data(), dim, w.data(), eps);
      std::vector<float> y(dim);
      rms_norm(1, dim, x.data(), dim, w.data(), eps, y.data(), dim, serial);
      CHECK(count_bad(1, dim, want, y.data(), dim) == 0);
    }
  }
}

enum class SumTarget { kSeparate, kAliasX, kAliasResidual };

TEST_CASE("add_rms_norm writes x + residual and its norm", "[kernels][rms_norm]") {
  std::mt19937 rng(9);
  Runners runners;
  IsaRestore restore;
  for (int64_t dim : {7, 64, 769, 5125, 20000}) {
    for (int64_t rows : {1, 3, 17}) {
      const int64_t ldx = dim + 1, ldr = dim + 9, lds = dim + 2, ldy = dim + 4;
      const std::vector<float> x = random_vec(rng, (rows - 1) * ldx + dim, -2.0f, 2.0f);
      const std::vector<float> res = random_vec(rng, (rows - 1) * ldr + dim, -2.0f, 2.0f);
      const std::vector<float> w = random_vec(rng, dim, 0.5f, 1.5f);
      const float eps = 1e-6f;
      // The sum is one f32 addition, exactly what the kernel must store.
      std::vector<float> sum_want(size_t(rows * dim));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < dim; ++i) {
          sum_want[size_t(r * dim + i)] = x[r * ldx + i] + res[r * ldr + i];
        }
      }
      const std::vector<double> want = reference(rows, dim, sum_want.data(), dim, w.data(), eps);
      for (Isa isa : supported_isas()) {
        REQUIRE(set_isa(isa));
        for (auto [name, runner] : runners.all()) {
          for (SumTarget target :
               {SumTarget::kSeparate, SumTarget::kAliasX, SumTarget::kAliasResidual}) {
            INFO("dim " << dim << " rows " << rows << " isa " << isa_name(isa) << " runner " << name
                        << " sum target " << static_cast<int>(target));
            std::vector<float> xb = x, rb = res;
            std::vector<float> sep((rows - 1) * lds + dim);
            float* sum = sep.data();
            int64_t ld_sum = lds;
            if (target == SumTarget::kAliasX) sum = xb.data(), ld_sum = ldx;
            if (target == SumTarget::kAliasResidual) sum = rb.data(), ld_sum = ldr;
            std::vector<float> y((rows - 1) * ldy + dim);
            add_rms_norm(rows, dim, xb.data(), ldx, rb.data(), ldr, w.data(), eps, sum, ld_sum,
                         y.data(), ldy, *runner);
            int64_t bad_sum = 0;
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t i = 0; i < dim; ++i) {
                bad_sum += sum[r * ld_sum + i] != sum_want[size_t(r * dim + i)];
              }
            }
            CHECK(bad_sum == 0);
            CHECK(count_bad(rows, dim, want, y.data(), ldy) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("rms_norm_backward: the float rows (4-lane double vectors) match the double kernel",
          "[rms_norm]") {
  // Widths around the 4-lane vectors and a real one, row strides past the width, threaded. The
  // float path sums in double like the double kernel (another order) and rounds each element
  // once: within one float rounding (2^-24 relative) of the double result plus the order's
  // ~1e-15, so 1e-6 relative to the row's largest term is far outside what a slip would give.
  std::mt19937 rng(91);
  sampan::ThreadPool pool(2);
  const double eps = 1e-5;
  for (int64_t dim : {1, 3, 4, 5, 37, 2048}) {
    INFO("dim " << dim);
    const int64_t rows = 9, ld = dim + 3;
    const std::vector<float> xf = random_vec(rng, rows * ld, -1.0f, 1.0f),
                             wf = random_vec(rng, dim, -1.0f, 1.0f),
                             gf = random_vec(rng, rows * ld, -1.0f, 1.0f);
    const std::vector<double> x2(xf.begin(), xf.end()), w2(wf.begin(), wf.end()),
        g2(gf.begin(), gf.end());
    std::vector<double> want(rows * ld, 0.0);
    rms_norm_backward<double>(rows, dim, x2.data(), ld, w2.data(), g2.data(), ld, eps,
                                   want.data(), ld, nullptr, pool);
    std::vector<float> got(rows * ld, 5.0f);
    rms_norm_backward<float>(rows, dim, xf.data(), ld, wf.data(), gf.data(), ld, eps,
                                  got.data(), ld, nullptr, pool);
    for (int64_t r = 0; r < rows; ++r) {
      double scale = 0;
      for (int64_t i = 0; i < dim; ++i) scale = std::max(scale, std::abs(want[r * ld + i]));
      for (int64_t i = 0; i < dim; ++i) {
        CHECK(std::abs(got[r * ld + i] - want[r * ld + i]) <= 1e-6 * scale + 1e-30);
      }
      for (int64_t i = dim; i < ld; ++i) CHECK(got[r * ld + i] == 5.0f);
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
