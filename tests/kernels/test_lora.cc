// The multi-adapter LoRA kernel (kernels/cpu/lora_cpu.h) against a double-precision loop:
// awkward sizes, padded row strides, tokens of several adapters interleaved with base tokens
// (-1), adapters of different ranks zero-padded to r_max, and one adapter that does not target
// the projection (scale 0).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/lora_cpu.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

struct Case {
  int64_t n_tokens, in, out, r_max;
  std::vector<int64_t> ranks;  // per adapter; 0: does not target this projection (scale 0)
  int64_t ldx_pad, ldy_pad, ldo_pad;
};

void run_case(const Case& c, uint32_t seed) {
  const int64_t n = static_cast<int64_t>(c.ranks.size());
  const int64_t ldx = c.in + c.ldx_pad, ldy = c.out + c.ldy_pad, ldo = c.out + c.ldo_pad;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(c.n_tokens * ldx));
  std::vector<float> y(static_cast<size_t>(c.n_tokens * ldy));
  for (float& v : x) v = u(rng);
  for (float& v : y) v = u(rng);
  // Stacked and zero-padded as the graph builder stacks them (models/llama.cc).
  std::vector<float> a(static_cast<size_t>(n * c.r_max * c.in), 0.0f);
  std::vector<float> b(static_cast<size_t>(n * c.out * c.r_max), 0.0f);
  std::vector<float> scale(static_cast<size_t>(n), 0.0f);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r = c.ranks[static_cast<size_t>(k)];
    if (r == 0) continue;
    scale[static_cast<size_t>(k)] = 2.0f / static_cast<float>(r) + 0.25f * static_cast<float>(k);
    for (int64_t j = 0; j < r; ++j) {
      for (int64_t i = 0; i < c.in; ++i) {
        a[static_cast<size_t>((k * c.r_max + j) * c.in + i)] = u(rng);
      }
    }
    for (int64_t o = 0; o < c.out; ++o) {
      for (int64_t j = 0; j < r; ++j) {
        b[static_cast<size_t>((k * c.out + o) * c.r_max + j)] = u(rng);
      }
    }
  }
  // Adapters interleaved token by token with base tokens: no adapter's rows are contiguous,
  // except where a case has one adapter only.
  std::vector<int32_t> ids(static_cast<size_t>(c.n_tokens));
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    const uint32_t pick = rng() % static_cast<uint32_t>(n + 1);  // 0: the base
    ids[static_cast<size_t>(t)] = static_cast<int32_t>(pick) - 1;
  }

  // Reference in double, with the magnitude of every term for the error bound.
  std::vector<double> want(static_cast<size_t>(c.n_tokens * c.out)), mag(want.size());
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    const int32_t k = ids[static_cast<size_t>(t)];
    for (int64_t o = 0; o < c.out; ++o) {
      const double yv = y[static_cast<size_t>(t * ldy + o)];
      double sum = yv, m = std::fabs(yv);
      if (k >= 0 && scale[static_cast<size_t>(k)] != 0.0f) {
        for (int64_t j = 0; j < c.r_max; ++j) {
          double h = 0, hm = 0;
          for (int64_t i = 0; i < c.in; ++i) {
            const double p = static_cast<double>(x[static_cast<size_t>(t * ldx + i)]) *
                             a[static_cast<size_t>((k * c.r_max + j) * c.in + i)];
            h += p;
            hm += std::fabs(p);
          }
          const double bj = b[static_cast<size_t>((k * c.out + o) * c.r_max + j)];
          const double s = scale[static_cast<size_t>(k)];
          sum += s * h * bj;
          m += std::fabs(s * bj) * hm;
        }
      }
      want[static_cast<size_t>(t * c.out + o)] = sum;
      mag[static_cast<size_t>(t * c.out + o)] = m;
    }
  }

  IsaRestore restore;
  Runners runners;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    for (auto [rname, runner] : runners.all()) {
      INFO("isa " << isa_name(isa) << " runner " << rname << " tokens " << c.n_tokens << " in "
                  << c.in << " out " << c.out << " r_max " << c.r_max);
      constexpr float kSentinel = -12345.0f;
      std::vector<float> got(static_cast<size_t>(c.n_tokens * ldo), kSentinel);
      lora_apply(c.n_tokens, c.in, c.out, n, c.r_max, y.data(), ldy, x.data(), ldx, ids.data(),
                 a.data(), b.data(), scale.data(), got.data(), ldo, *runner);
      double worst = 0;  // error / allowed error
      int64_t untouched_padding = 0, padding = 0;
      for (int64_t t = 0; t < c.n_tokens; ++t) {
        for (int64_t o = 0; o < ldo; ++o) {
          const float g = got[static_cast<size_t>(t * ldo + o)];
          if (o >= c.out) {
            ++padding;
            untouched_padding += g == kSentinel;
            continue;
          }
          // f32 sums of `in` products, then of r_max, then the add to y: each step's rounding is
          // at most 2^-24 of the running magnitude, so (in + r_max + 2) · 2^-24 · Σ|terms|
          // bounds the error; the factor 2 leaves room for the FMA kernels' partial sums.
          const size_t w = static_cast<size_t>(t * c.out + o);
          const double allowed =
              2.0 * static_cast<double>(c.in + c.r_max + 2) * 0x1p-24 * mag[w] + 1e-30;
          worst = std::max(worst, std::fabs(g - want[w]) / allowed);
        }
      }
      CHECK(worst <= 1.0);
      CHECK(untouched_padding == padding);  // only y_out[t, 0:out] is written
    }
  }
}

TEST_CASE("lora_apply matches a double reference over mixed adapters", "[kernels][lora]") {
  // in/out odd and past the vector widths; ranks 3, 5 (r_max), 1 and an untargeted adapter.
  run_case({37, 97, 131, 5, {3, 5, 0, 1}, 3, 7, 1}, 1);
}

TEST_CASE("lora_apply on a decode-sized batch and one token", "[kernels][lora]") {
  run_case({6, 64, 48, 8, {8, 2}, 0, 16, 0}, 2);
  run_case({1, 33, 17, 4, {4}, 5, 0, 3}, 3);
}

TEST_CASE("lora_apply on a prefill-sized batch of large widths", "[kernels][lora]") {
  run_case({129, 300, 257, 16, {16, 7, 12}, 0, 0, 0}, 4);
}

TEST_CASE("lora_apply with every token on the base copies y exactly", "[kernels][lora]") {
  const int64_t t = 5, in = 9, out = 11;
  std::vector<float> x(static_cast<size_t>(t * in), 1.0f), y(static_cast<size_t>(t * out));
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i) * 0.37f - 3.0f;
  std::vector<float> a(static_cast<size_t>(2 * in), 1.0f), b(static_cast<size_t>(out * 2), 1.0f);
  const std::vector<float> scale = {1.0f};
  const std::vector<int32_t> ids(static_cast<size_t>(t), -1);
  std::vector<float> got(y.size(), 0.0f);
  SerialRunner serial;
  lora_apply(t, in, out, 1, 2, y.data(), out, x.data(), in, ids.data(), a.data(), b.data(),
             scale.data(), got.data(), out, serial);
  CHECK(got == y);
  // In place (y_out == y) is allowed too.
  std::vector<float> inplace = y;
  std::vector<int32_t> ids0(static_cast<size_t>(t), 0);
  lora_apply(t, in, out, 1, 2, inplace.data(), out, x.data(), in, ids0.data(), a.data(), b.data(),
             scale.data(), inplace.data(), out, serial);
  for (size_t i = 0; i < y.size(); ++i) CHECK(inplace[i] == Approx(y[i] + 2.0f * in).epsilon(1e-6));
}

}  // namespace
}  // namespace sampan::cpu
