// silu_mul against a plain double-precision reference, measured in f32 ulps: this also tests the
// vectorised exp inside it over the whole useful range.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/silu_mul_cpu.h"
#include "kernels/cpu/silu_mul_grad_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }

// Distance in units in the last place between two finite floats (0 for +0 vs -0).
int64_t ulp_distance(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Results below this are where e^-g overflows f32 (g < -88.72): like PyTorch, the kernel then
// returns -0 while the exact value is below 3e-37. Compared by absolute difference there.
constexpr double kTiny = 1e-30;

TEST_CASE("silu is within 3 ulp over [-100, 100]", "[kernels][silu_mul]") {
  // Measured worst case: 2 ulp (exp's polynomial and reduction ~1 ulp, then 1 + e, the
  // division). 3 ulp leaves a margin; an exp that is off by 1e-6 would fail by far.
  std::vector<float> g;
  for (int i = 0; i <= 400000; ++i) {
    g.push_back(-100.0f + 200.0f * static_cast<float>(i) / 400000.0f);
  }
  for (float s : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-8f, -1e-8f, 3e4f, -3e4f, 88.72f, -88.72f, 87.33f,
                  -87.33f, 103.9f, -103.9f}) {
    g.push_back(s);
  }
  const int64_t n = static_cast<int64_t>(g.size());
  const std::vector<float> u(g.size(), 1.0f);
  SerialRunner serial;
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    INFO("isa " << isa_name(isa));
    std::vector<float> y(g.size());
    silu_mul(1, n, g.data(), n, u.data(), n, y.data(), n, serial);
    int64_t worst = 0, bad_tiny = 0;
    float worst_g = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double want = silu_ref(g[i]);
      if (std::fabs(want) < kTiny) {
        bad_tiny += !(std::fabs(y[i] - want) < kTiny);
        continue;
      }
      const int64_t e = ulp_distance(y[i], static_cast<float>(want));
      if (e > worst) worst = e, worst_g = g[i];
    }
    INFO("worst " << worst << " ulp at g = " << worst_g);
    CHECK(worst <= 3);
    CHECK(bad_tiny == 0);
  }
}

enum class Out { kSeparate, kAliasGate, kAliasUp };

TEST_CASE("silu_mul: shapes, strides, aliasing, runners", "[kernels][silu_mul]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dg(-12.0f, 12.0f), du(-2.0f, 2.0f);
  Runners runners;
  IsaRestore restore;
  // 20000 and 40000 on one row exercise the column split of decode-sized inputs.
  for (int64_t n : {1, 7, 64, 769, 5125, 20000, 40000}) {
    for (int64_t rows : {1, 3, 17}) {
      const int64_t ldg = n + 3, ldu = n + 8, ldy = n + 1;
      std::vector<float> g(size_t((rows - 1) * ldg + n)), u(size_t((rows - 1) * ldu + n));
      for (float& x : g) x = dg(rng);
      for (float& x : u) x = du(rng);
      for (Isa isa : supported_isas()) {
        REQUIRE(set_isa(isa));
        for (auto [name, runner] : runners.all()) {
          for (Out target : {Out::kSeparate, Out::kAliasGate, Out::kAliasUp}) {
            INFO("n " << n << " rows " << rows << " isa " << isa_name(isa) << " runner " << name
                      << " out " << static_cast<int>(target));
            std::vector<float> gb = g, ub = u, yb(size_t((rows - 1) * ldy + n));
            float* y = yb.data();
            int64_t ld = ldy;
            if (target == Out::kAliasGate) y = gb.data(), ld = ldg;
            if (target == Out::kAliasUp) y = ub.data(), ld = ldu;
            silu_mul(rows, n, gb.data(), ldg, ub.data(), ldu, y, ld, *runner);
            // silu within 2 ulp, times u: one more rounding. 4 ulp.
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t i = 0; i < n; ++i) {
                const double want = silu_ref(g[size_t(r * ldg + i)]) * u[size_t(r * ldu + i)];
                const float got = y[r * ld + i];
                if (std::fabs(want) < kTiny ? !(std::fabs(got - want) < kTiny)
                                            : ulp_distance(got, static_cast<float>(want)) > 4) {
                  if (bad++ == 0) {
                    UNSCOPED_INFO("row " << r << " col " << i << ": " << got << " want " << want);
                  }
                }
              }
            }
            CHECK(bad == 0);
          }
        }
      }
    }
  }
}

// The f32 backward (the vector rows of row_kernels.h on every ISA the CPU has) against the
// double loop on the same inputs. Per element, with s = sigmoid(g) from the vector exp (its
// error a few 2^-24 relative, "silu is within 3 ulp" above) and about six f32 roundings:
//   |du - du_ref| <= 2^-19 |dy g|,   |dg - dg_ref| <= 2^-19 |dy u| (1 + |g|);
// (1 - s) may lose all relative accuracy where s rounds to 1, but only by 2^-24 absolute, which
// g (1 - s) turns into 2^-24 |g|, inside the second bound. A wrong formula, index or stride is
// off by the size of the terms themselves.
TEST_CASE("silu_mul backward in f32 matches the double loop", "[kernels][silu_mul]") {
  IsaRestore restore;
  Runners runners;
  std::mt19937 rng(91);
  std::uniform_real_distribution<float> gd(-20.0f, 20.0f);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  int64_t checked = 0;
  for (int64_t n : {1, 7, 16, 17, 33, 100, 5632 + 3}) {
    const int64_t rows = n > 1000 ? 5 : 13;
    const int64_t ld = n + 3;
    std::vector<float> g(static_cast<size_t>(rows * ld)), u(g.size()), dy(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = gd(rng);
      u[i] = nd(rng);
      dy[i] = nd(rng);
    }
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f, -100.0f, 30.0f, -30.0f};
    for (size_t i = 0; i < std::size(special) && i < g.size(); ++i) g[i] = special[i];
    std::vector<double> gd64(g.begin(), g.end()), ud64(u.begin(), u.end()), dd64(dy.begin(), dy.end());
    std::vector<double> dg_ref(g.size()), du_ref(g.size());
    SerialRunner serial;
    silu_mul_backward<double>(rows, n, gd64.data(), ld, ud64.data(), ld, dd64.data(), ld,
                              dg_ref.data(), ld, du_ref.data(), ld, serial);
    for (Isa isa : supported_isas()) {
      REQUIRE(set_isa(isa));
      for (auto [name, runner] : runners.all()) {
        INFO(isa_name(isa) << " " << name << " n " << n);
        std::vector<float> dg(g.size(), -5.0f), du(g.size(), -5.0f);
        silu_mul_backward<float>(rows, n, g.data(), ld, u.data(), ld, dy.data(), ld, dg.data(), ld,
                                 du.data(), ld, *runner);
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < ld; ++c) {
            const size_t i = static_cast<size_t>(r * ld + c);
            if (c >= n) {  // padding untouched
              bad += dg[i] != -5.0f || du[i] != -5.0f;
              continue;
            }
            const double tol_u = std::ldexp(std::fabs(dd64[i] * gd64[i]), -19);
            const double tol_g = std::ldexp(std::fabs(dd64[i] * ud64[i]) * (1.0 + std::fabs(gd64[i])), -19);
            bad += !(std::fabs(du[i] - du_ref[i]) <= tol_u) || !(std::fabs(dg[i] - dg_ref[i]) <= tol_g);
          }
        }
        CHECK(bad == 0);
        ++checked;
      }
    }
  }
  CHECK(checked > 0);
}

}  // namespace
}  // namespace sampan::cpu
