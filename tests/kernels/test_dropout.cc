// scaled_dropout (kernels/cpu/dropout_cpu.h), f32: on every instruction set the CPU has (the
// AVX-512 kernel, the AVX2 one with its scalar tail) each element equals the reference written
// here from the documented contract: dropout_keep(seed, r * cols + c, p) ? x * float(scale /
// (1 - p)) : 0, bit for bit; for awkward widths (tails of the 16- and 8-wide vectors), strides,
// in place, p from 0 to nearly 1, 64-bit seeds and every runner.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/dropout_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

TEST_CASE("scaled_dropout f32 matches the keep function bit for bit", "[kernels][dropout]") {
  IsaRestore restore;
  Runners runners;
  std::mt19937_64 rng(77);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  int64_t checked = 0, kept_total = 0, dropped_total = 0;
  for (int64_t cols : {1, 7, 15, 16, 17, 31, 33, 64, 100, 2048 + 7}) {
    for (double p : {0.0, 0.05, 0.5, 0.999}) {
      const int64_t rows = cols > 1000 ? 3 : 37;
      const int64_t ldx = cols + (cols % 3), ldy = cols + 5;
      const uint64_t seed = rng();
      const double scale = 1.75;
      std::vector<float> x(static_cast<size_t>(rows * ldx));
      for (float& v : x) v = nd(rng);
      x[0] = NAN;  // a dropped NaN becomes 0, a kept one stays NaN
      const float kept = static_cast<float>(scale / (1.0 - p));
      std::vector<float> want(static_cast<size_t>(rows * ldy), -7.0f);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const bool keep = dropout_keep(seed, static_cast<uint64_t>(r * cols + c), p);
          want[static_cast<size_t>(r * ldy + c)] = keep ? x[static_cast<size_t>(r * ldx + c)] * kept : 0.0f;
          (keep ? kept_total : dropped_total) += 1;
        }
      }
      for (Isa isa : supported_isas()) {
        REQUIRE(set_isa(isa));
        for (auto [name, runner] : runners.all()) {
          INFO(isa_name(isa) << " " << name << " cols " << cols << " p " << p);
          std::vector<float> y(static_cast<size_t>(rows * ldy), -7.0f);  // padding stays -7
          scaled_dropout<float>(rows, cols, x.data(), ldx, seed, p, scale, y.data(), ldy, *runner);
          int64_t bad = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            bad += std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(want[i]);
          }
          CHECK(bad == 0);
          // In place (y == x, equal strides).
          std::vector<float> inplace(x.begin(), x.end());
          scaled_dropout<float>(rows, cols, inplace.data(), ldx, seed, p, scale, inplace.data(), ldx,
                                *runner);
          int64_t bad_inplace = 0;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
              bad_inplace += std::bit_cast<uint32_t>(inplace[static_cast<size_t>(r * ldx + c)]) !=
                             std::bit_cast<uint32_t>(want[static_cast<size_t>(r * ldy + c)]);
            }
          }
          CHECK(bad_inplace == 0);
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 0);
  // The masks are neither all kept nor all dropped overall (p = 0.5 alone guarantees both).
  CHECK(kept_total > 0);
  CHECK(dropped_total > 0);
}

}  // namespace
}  // namespace sampan::cpu
