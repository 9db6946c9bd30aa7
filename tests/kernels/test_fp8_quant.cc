// fp8_quant_cpu: the vectorised FP8 E4M3 row encoder against quant::f32_to_fp8_e4m3 (the
// reference encoder, quant/fp8.h) bit for bit, and the row absmax with its non-finite check:
// every E4M3 value and the midpoints between neighbours (ties to even), their f32 neighbours,
// the subnormal range, the 448 saturation boundary, both signs, random values, and row lengths
// with every tail (k % 8).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/fp8_quant_cpu.h"
#include "quant/fp8.h"

namespace sampan::cpu {
namespace {

float next_up(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float next_down(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

// E4M3 code c (0..0x7e) as f32.
float e4m3(int c) {
  const int e = (c >> 3) & 15, m = c & 7;
  return e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
}

std::vector<float> tricky() {
  std::vector<float> v = {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3.4e38f, 0x1p-6f,
                          0x1p-7f, 0x1p-9f, 0x1p-10f, 0x1p-11f, 1e-30f, 1e-45f};
  for (int c = 0; c < 0x7e; ++c) {
    const float a = e4m3(c), b = e4m3(c + 1), mid = (a + b) / 2;  // exact in f32
    for (float f : {a, next_up(a), next_down(a), mid, next_up(mid), next_down(mid)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  std::uniform_real_distribution<float> lg(-40.0f, 10.0f);
  for (int i = 0; i < 2000; ++i) {
    v.push_back(nd(rng));
    v.push_back(std::exp2(lg(rng)) * (i % 2 ? 1.0f : -1.0f));
  }
  return v;
}

TEST_CASE("fp8 row encoder equals the reference encoder bit for bit") {
  const std::vector<float> v = tricky();
  int checked = 0;
  for (float scale : {1.0f, 0.5f, 0.0123f, 3.0f}) {
    for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, static_cast<int64_t>(v.size())}) {
      for (int64_t off = 0; off + k <= static_cast<int64_t>(v.size()); off += std::max<int64_t>(k, 97)) {
        std::vector<uint8_t> out(static_cast<size_t>(k) + 1, 0xaa);
        fp8_encode_row(v.data() + off, k, scale, out.data());
        for (int64_t c = 0; c < k; ++c) {
          const float x = v[static_cast<size_t>(off + c)];
          CAPTURE(scale, k, x);
          REQUIRE(out[static_cast<size_t>(c)] == quant::f32_to_fp8_e4m3(x / scale));
          ++checked;
        }
        REQUIRE(out[static_cast<size_t>(k)] == 0xaa);  // nothing written past the row
      }
    }
  }
  CHECK(checked > 20000);
}

TEST_CASE("fp8 row absmax, and any non-finite element reported") {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int64_t k : {1, 5, 8, 33, 2048}) {
    std::vector<float> x(static_cast<size_t>(k));
    for (auto& f : x) f = nd(rng);
    float want = 0.0f;
    for (float f : x) want = std::fmax(want, std::fabs(f));
    float amax = -1.0f;
    REQUIRE(fp8_row_absmax(x.data(), k, &amax));
    CHECK(amax == want);
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      for (int64_t at : {int64_t{0}, k - 1, k / 2}) {
        std::vector<float> y = x;
        y[static_cast<size_t>(at)] = bad;
        CHECK_FALSE(fp8_row_absmax(y.data(), k, &amax));
      }
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
