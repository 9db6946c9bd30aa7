// The sampler's vector passes over logits (kernels/cpu/logits_scan_cpu.h, softmax_cpu.h's
// exp_shifted) against scalar references: every length 1..70 (full vectors and every tail),
// NaN / +inf / -inf placed at every position class, ties, and values far below the maximum.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/logits_scan_cpu.h"
#include "kernels/cpu/softmax_cpu.h"

using namespace sampan::cpu;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(int64_t n, std::mt19937& rng, float spread) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

}  // namespace

TEST_CASE("scan_logits finds the first NaN or +inf, whether any logit is finite, and the max",
          "[kernels][sampling]") {
  std::mt19937 rng(5);
  int checked = 0;
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> x = random_logits(n, rng, 3.0f);
    LogitsScan s = scan_logits(n, x.data());
    CHECK(s.first_bad == -1);
    CHECK(s.any_finite);
    CHECK(s.max == *std::max_element(x.begin(), x.end()));
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
        std::vector<float> y = x;
        y[static_cast<size_t>(at)] = bad;
        if (at + 1 < n) y[static_cast<size_t>(n - 1)] = bad;  // a later one too
        INFO("n " << n << " at " << at << " bad " << bad);
        CHECK(scan_logits(n, y.data()).first_bad == at);
        ++checked;
      }
    }
    std::vector<float> all_neg(static_cast<size_t>(n), -kInf);
    s = scan_logits(n, all_neg.data());
    CHECK(s.first_bad == -1);
    CHECK_FALSE(s.any_finite);
    CHECK(s.max == -kInf);
    all_neg[static_cast<size_t>(n - 1)] = -1e30f;  // the only finite one, in the tail
    s = scan_logits(n, all_neg.data());
    CHECK(s.any_finite);
    CHECK(s.max == -1e30f);
  }
  CHECK(checked == 70 * 6);
}

TEST_CASE("argmax_first is the lowest index of the largest value", "[kernels][sampling]") {
  std::mt19937 rng(6);
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> x = random_logits(n, rng, 3.0f);
    // Coarse values make ties; -inf entries too.
    for (float& v : x) v = std::round(v);
    if (n > 3) x[1] = -kInf;
    const auto want = std::max_element(x.begin(), x.end()) - x.begin();  // first of the largest
    INFO("n " << n);
    CHECK(argmax_first(n, x.data()) == want);
    std::vector<float> neg(static_cast<size_t>(n), -kInf);
    CHECK(argmax_first(n, neg.data()) == 0);
  }
}

TEST_CASE("top_k_candidates holds every index that can be among the k best",
          "[kernels][sampling]") {
  std::mt19937 rng(7);
  std::vector<int32_t> got;
  int checked = 0;
  for (int64_t n : {1, 7, 8, 9, 63, 100, 1000, 5003}) {
    for (int64_t k : {1, 2, 5, 40, 999}) {
      if (k >= n) continue;
      for (int pattern = 0; pattern < 3; ++pattern) {
        std::vector<float> x = random_logits(n, rng, 3.0f);
        if (pattern == 1) {
          for (float& v : x) v = std::round(v);  // many ties at the threshold
        } else if (pattern == 2) {
          for (size_t i = 0; i < x.size(); ++i) {
            if (i % 3 != 0) x[i] = -kInf;  // fewer finite values than k at times
          }
        }
        top_k_candidates(n, x.data(), k, got);
        // The k-th largest value: everything at or above it must be a candidate.
        std::vector<float> sorted = x;
        std::sort(sorted.begin(), sorted.end(), std::greater<float>());
        const float kth = sorted[static_cast<size_t>(k - 1)];
        INFO("n " << n << " k " << k << " pattern " << pattern);
        CHECK(std::is_sorted(got.begin(), got.end()));
        CHECK(std::adjacent_find(got.begin(), got.end()) == got.end());
        int64_t above = 0;
        for (int64_t i = 0; i < n; ++i) above += x[static_cast<size_t>(i)] >= kth;
        int64_t found = 0;
        for (const int32_t id : got) {
          REQUIRE(id >= 0);
          REQUIRE(id < n);
          found += x[static_cast<size_t>(id)] >= kth;
        }
        CHECK(found == above);
        CHECK(static_cast<int64_t>(got.size()) >= k);
        ++checked;
      }
    }
  }
  CHECK(checked > 50);
}

TEST_CASE("exp_shifted: exp within 2 ulp, 0 far below the shift, sums in double",
          "[kernels][sampling]") {
  std::mt19937 rng(8);
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> x = random_logits(n, rng, 40.0f);  // reaches far below the max
    if (n > 2) x[2] = -kInf;
    const float shift = *std::max_element(x.begin(), x.end());
    std::vector<float> y(static_cast<size_t>(n), 7.0f);
    const double sum = exp_shifted(n, x.data(), shift, y.data());
    double want_sum = 0;
    int64_t worst_ulp = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[static_cast<size_t>(i)] - shift;
      const float got = y[static_cast<size_t>(i)];
      INFO("n " << n << " i " << i << " v " << v);
      if (!(v >= -86.6f)) {
        CHECK(got == 0.0f);
        continue;
      }
      const double e = std::exp(static_cast<double>(v));
      CHECK(std::fpclassify(got) == FP_NORMAL);
      const double ulp = std::ldexp(1.0, std::ilogb(e) - 23);
      worst_ulp = std::max<int64_t>(worst_ulp, std::llround(std::fabs(got - e) / ulp));
      want_sum += got;
    }
    CHECK(worst_ulp <= 2);
    CHECK(sum == Approx(want_sum).epsilon(1e-12));
    CHECK(exp_shifted(n, x.data(), shift, nullptr) == sum);  // the same without storing
    // In place.
    std::vector<float> z = x;
    CHECK(exp_shifted(n, z.data(), shift, z.data()) == sum);
    CHECK(z == y);
  }
}

TEST_CASE("indices_at_least and exponent_masses against scalar loops", "[kernels][sampling]") {
  std::mt19937 rng(9);
  std::vector<int32_t> got;
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> w(static_cast<size_t>(n));
    std::uniform_real_distribution<float> e(-130.0f, 0.0f);
    for (float& v : w) v = std::exp2(e(rng));  // normals, subnormals and exact zeros
    w[0] = 0.0f;
    const float t = w[static_cast<size_t>(n / 2)];
    indices_at_least(n, w.data(), t, got);
    std::vector<int32_t> want;
    for (int64_t i = 0; i < n; ++i) {
      if (w[static_cast<size_t>(i)] >= t) want.push_back(static_cast<int32_t>(i));
    }
    INFO("n " << n);
    CHECK(got == want);
    double mass[256] = {}, ref[256] = {};
    mass[7] = 1.0;  // added to, not overwritten
    ref[7] = 1.0;
    exponent_masses(n, w.data(), mass);
    for (const float v : w) {
      if (v > 0.0f) ref[std::ilogb(v) >= -126 ? std::ilogb(v) + 127 : 0] += v;
    }
    for (int b = 0; b < 256; ++b) CHECK(mass[b] == Approx(ref[b]).epsilon(1e-12));
  }
}
