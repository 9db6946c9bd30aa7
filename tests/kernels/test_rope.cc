// rope (HF rotate_half layout) against a plain double-precision reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/rope_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

// HF's default rotary frequencies, 1 / theta^(2i / d), divided by `linear` (linear scaling).
std::vector<float> inv_freq_for(int64_t head_dim, double theta, double linear) {
  std::vector<float> f(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    f[size_t(i)] = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim) / linear);
  }
  return f;
}

struct Case {
  int64_t n_heads, head_dim;
  std::vector<int32_t> pos;
  double theta, linear;
  float attn_factor;
};

TEST_CASE("rope matches the double reference", "[kernels][rope]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dx(-2.0f, 2.0f);
  // Positions: not starting at 0, not consecutive, past 100k (where an inaccurate cos/sin of a
  // large angle would show), repeated.
  const std::vector<int32_t> far = {100003, 131071, 7,     0,   65536, 100003,  250000, 1, 99,
                                    4097,   32767,  12345, 500, 501,   1000000, 3,      77};
  const std::vector<Case> cases = {
      {32, 64, {5}, 10000.0, 1.0, 1.0f},
      {32, 64, {9, 10, 11}, 10000.0, 1.0, 1.0f},
      {12, 128, far, 1000000.0, 1.0, 1.0f},
      {4, 80, far, 10000.0, 4.0, 1.0f},
      {2, 6, {3, 1, 2}, 10000.0, 1.0, 1.0f},  // half of 3: only the vector tail path
      {8, 128, {40000, 40001, 40002}, 500000.0, 8.0, 1.1f},
      {1, 256, far, 10000.0, 1.0, 0.9f},
      {3, 1024, {17, 100001}, 10000.0, 1.0, 1.0f},  // head_dim beyond the stack table
  };
  Runners runners;
  IsaRestore restore;
  for (const Case& c : cases) {
    const int64_t n = static_cast<int64_t>(c.pos.size()), hd = c.head_dim, half = hd / 2;
    const int64_t width = c.n_heads * hd;
    const std::vector<float> inv_freq = inv_freq_for(hd, c.theta, c.linear);
    // x is the middle of a fused [q | k | v]-like row: offset 13, row stride width + 40.
    const int64_t ldx = width + 40, off = 13;
    std::vector<float> buf(size_t(off + (n - 1) * ldx + width));
    for (float& v : buf) v = dx(rng);
    const float* x = buf.data() + off;

    // Reference: the angle is rounded to f32 (HF computes positions * inv_freq in f32), the
    // rest in double.
    std::vector<double> want(size_t(n * width));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < c.n_heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const float a = static_cast<float>(c.pos[size_t(t)]) * inv_freq[size_t(i)];
          const double co = std::cos(double(a)) * c.attn_factor;
          const double si = std::sin(double(a)) * c.attn_factor;
          const double x1 = x[t * ldx + h * hd + i], x2 = x[t * ldx + h * hd + half + i];
          want[size_t(t * width + h * hd + i)] = x1 * co - x2 * si;
          want[size_t(t * width + h * hd + half + i)] = x2 * co + x1 * si;
        }
      }
    }
    // Error: cos and sin are rounded to f32 (then scaled by attn_factor, one more rounding) and
    // the two products and their sum are rounded: measured worst 1.8e-7 of
    // (|x1| + |x2|) * attn_factor. The bound is relative to that sum, not to y, because y can
    // cancel to near zero. 1e-6 leaves a margin; a wrong angle, sign or pairing is off by O(1).
    auto check = [&](const float* y, int64_t ldy) {
      int64_t bad = 0;
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t h = 0; h < c.n_heads; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            const double x1 = x[t * ldx + h * hd + i], x2 = x[t * ldx + h * hd + half + i];
            const double tol = 1e-6 * (std::fabs(x1) + std::fabs(x2)) * c.attn_factor;
            for (int64_t j : {i, half + i}) {
              const double got = y[t * ldy + h * hd + j], w = want[size_t(t * width + h * hd + j)];
              if (!(std::fabs(got - w) <= tol)) {
                if (bad++ == 0) {
                  UNSCOPED_INFO("token " << t << " head " << h << " elem " << j << ": " << got
                                         << " want " << w);
                }
              }
            }
          }
        }
      }
      return bad;
    };
    for (Isa isa : supported_isas()) {
      REQUIRE(set_isa(isa));
      for (auto [name, runner] : runners.all()) {
        INFO("heads " << c.n_heads << " head_dim " << hd << " tokens " << n << " isa "
                      << isa_name(isa) << " runner " << name);
        const int64_t ldy = width + 3;
        std::vector<float> y(size_t((n - 1) * ldy + width));
        rope(n, c.n_heads, hd, x, ldx, c.pos.data(), inv_freq.data(), c.attn_factor, y.data(), ldy,
             *runner);
        CHECK(check(y.data(), ldy) == 0);
        // In place, inside the fused row: the columns around x must be left alone.
        std::vector<float> inplace = buf;
        float* xi = inplace.data() + off;
        rope(n, c.n_heads, hd, xi, ldx, c.pos.data(), inv_freq.data(), c.attn_factor, xi, ldx,
             *runner);
        CHECK(check(xi, ldx) == 0);
        int64_t touched = 0;
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t j = width; j < ldx && t * ldx + j + off < int64_t(buf.size()); ++j) {
            touched += inplace[size_t(off + t * ldx + j)] != buf[size_t(off + t * ldx + j)];
          }
        }
        for (int64_t j = 0; j < off; ++j) touched += inplace[size_t(j)] != buf[size_t(j)];
        CHECK(touched == 0);
      }
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
