// int4_quant_cpu: the vectorised group arithmetic of INT4 quantization against the scalar
// definitions written here from kernels/cpu/int4_quant_cpu.h (range, codes with nearbyint, the
// squared error's 8 fma partial sums), bit for bit: random groups, exact .5 ties of x / scale,
// values that clamp, signed zeros, tiny and huge scales, and non-finite elements.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/int4_quant_cpu.h"

namespace sampan::cpu {
namespace {

int ref_code(float x, float scale, int zero) {
  const float v = std::nearbyint(x / scale) + static_cast<float>(zero);
  return static_cast<int>(std::fmax(-8.0f, std::fmin(7.0f, v)));
}

double ref_error(const float* x, int64_t g, float scale, int zero) {
  double s[8] = {};
  for (int64_t c = 0; c < g; ++c) {
    const float p = static_cast<float>(ref_code(x[c], scale, zero) - zero) * scale;
    const double d = static_cast<double>(x[c]) - static_cast<double>(p);
    s[c % 8] = std::fma(d, d, s[c % 8]);
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// A group of g values: Gaussian, with exact ties of x / scale (k + 0.5) * scale for the scales
// used below, values past the clamp, and signed zeros.
std::vector<float> group(int64_t g, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f * scale);
  std::vector<float> x(static_cast<size_t>(g));
  for (auto& v : x) v = nd(rng);
  for (int64_t c = 0; c < g; c += 5) {
    x[static_cast<size_t>(c)] = (static_cast<float>(static_cast<int>(rng() % 17) - 8) + 0.5f) * scale;
  }
  x[1] = 40.0f * scale;
  x[2] = -40.0f * scale;
  x[3] = -0.0f;
  x[4] = 0.0f;
  return x;
}

TEST_CASE("int4 group codes and errors equal the scalar definition bit for bit") {
  int checked = 0;
  for (int64_t g : {8, 32, 64, 128}) {
    for (float scale : {0.25f, 0.013f, 3.0e-8f, 1.0f, 6.5e4f}) {
      for (int zero : {0, -3, 5, -8}) {
        for (uint32_t seed = 1; seed <= 3; ++seed) {
          CAPTURE(g, scale, zero, seed);
          const std::vector<float> x = group(g, seed * 31 + static_cast<uint32_t>(g), scale);
          std::vector<int8_t> codes(static_cast<size_t>(g), 99);
          int4_group_codes(x.data(), g, scale, zero, codes.data());
          for (int64_t c = 0; c < g; ++c) {
            REQUIRE(codes[static_cast<size_t>(c)] == ref_code(x[static_cast<size_t>(c)], scale, zero));
          }
          // 1..11 candidates (the batches of 4 and every remainder), scales around this one.
          for (int n : {1, 2, 3, 4, 5, 11}) {
            std::vector<float> sc(static_cast<size_t>(n));
            std::vector<int> zs(static_cast<size_t>(n));
            for (int i = 0; i < n; ++i) {
              sc[static_cast<size_t>(i)] = scale * (1.0f - 0.025f * static_cast<float>(i));
              zs[static_cast<size_t>(i)] = zero + (i % 3) - 1;
            }
            std::vector<double> e(static_cast<size_t>(n), -1.0);
            int4_group_errors(x.data(), g, sc.data(), zs.data(), n, e.data());
            for (int i = 0; i < n; ++i) {
              const double want = ref_error(x.data(), g, sc[static_cast<size_t>(i)], zs[static_cast<size_t>(i)]);
              REQUIRE(bits(e[static_cast<size_t>(i)]) == bits(want));
              ++checked;
            }
          }
        }
      }
    }
  }
  CHECK(checked > 1000);
}

TEST_CASE("int4 group range: min and max with 0, and any non-finite element reported") {
  std::mt19937 rng(7);
  for (int64_t g : {8, 32, 128}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(static_cast<size_t>(g));
      std::uniform_real_distribution<float> ud(trial % 2 ? 0.5f : -2.0f, 3.0f);  // some all positive
      for (auto& v : x) v = ud(rng);
      float lo = 1, hi = -1, want_lo = 0, want_hi = 0;
      for (float v : x) want_lo = std::fmin(want_lo, v), want_hi = std::fmax(want_hi, v);
      REQUIRE(int4_group_range(x.data(), g, &lo, &hi));
      CHECK(lo == want_lo);
      CHECK(hi == want_hi);
      for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
        std::vector<float> y = x;
        y[rng() % static_cast<size_t>(g)] = bad;
        CHECK_FALSE(int4_group_range(y.data(), g, &lo, &hi));
      }
    }
  }
  // All zeros (of either sign): the range is a zero, and the group counts as empty.
  std::vector<float> z = {0.0f, -0.0f, 0.0f, -0.0f, 0.0f, 0.0f, -0.0f, 0.0f};
  float lo = 1, hi = 1;
  REQUIRE(int4_group_range(z.data(), 8, &lo, &hi));
  CHECK(lo == 0.0f);
  CHECK(hi == 0.0f);
}

}  // namespace
}  // namespace sampan::cpu
