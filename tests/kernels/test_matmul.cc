// Kernel-level checks for matmul's pieces: the fused bias/activation epilogue
// (kernels/cpu/binary_cpu.h) against double formulas, and, hidden behind [bench], the speed of
// the matmul op on BERT-base shapes and of the two ways to run attention's batched products.
// Run the timings with `test_matmul "[bench]"`.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "kernels/cpu/binary_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/sgemm_packed_cpu.h"
#include "kernels/cpu/unary_cpu.h"

using namespace sampan;
using namespace sampan::graph;

namespace {

Tensor random_f32(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(shape, v);
}

}  // namespace

TEST_CASE("bias_activation matches relu, erf gelu and tanh gelu in double", "[matmul]") {
  // 1000 columns (a masked tail of 0 mod 8 ... 7 across the row lengths below), x over
  // [-12, 12]: both tails of gelu and the saturation of tanh.
  sampan::cpu::SerialRunner serial;
  ThreadPool pool(2);
  for (int64_t n : {1000, 13, 8, 3}) {
    const int64_t rows = 7, ld = n + 5;
    std::vector<float> x(static_cast<size_t>(rows * ld)), bias(static_cast<size_t>(n));
    for (int64_t i = 0; i < rows * ld; ++i)
      x[static_cast<size_t>(i)] = -12.0f + 24.0f * static_cast<float>(i % 997) / 996.0f;
    for (int64_t j = 0; j < n; ++j)
      bias[static_cast<size_t>(j)] = 0.01f * static_cast<float>(j % 7);
    using sampan::cpu::Activation;
    for (Activation act :
         {Activation::kNone, Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
      for (sampan::cpu::TaskRunner* r : {static_cast<sampan::cpu::TaskRunner*>(&serial),
                                         static_cast<sampan::cpu::TaskRunner*>(&pool)}) {
        std::vector<float> y = x;
        sampan::cpu::bias_activation(rows, n, y.data(), ld, 0.5f, bias.data(), act, *r);
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < ld; ++j) {
            const size_t u = static_cast<size_t>(i * ld + j);
            if (j >= n) {  // padding between rows is never written
              CHECK(y[u] == x[u]);
              continue;
            }
            const double v = 0.5 * x[u] + bias[static_cast<size_t>(j)];
            double want = v;
            if (act == Activation::kRelu) want = std::max(v, 0.0);
            if (act == Activation::kGelu) want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
            if (act == Activation::kGeluTanh) {
              want =
                  0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
            }
            // erf to 2e-7 absolute (avx2_math.h) times |v| / 2 <= 3, plus f32 rounding of the
            // result.
            INFO("n " << n << " act " << static_cast<int>(act) << " v " << v);
            CHECK(std::abs(y[u] - want) <= 6e-7 + 2e-7 * std::abs(want));
          }
        }
      }
    }
  }
}

TEST_CASE("bias_activation's gelu and gelu_tanh are unary_f32's, bit for bit", "[matmul]") {
  // A matmul with a fused activation must give what the unfused Gelu op gives. alpha = 1 so that
  // y + bias is one rounding on both sides; rows of 0..15 mod 16 columns (the masked tails of the
  // 8- and 16-lane forms against unary_f32's padded copy); x over [-12, 12] and, every 97th,
  // the edges: +-inf, NaN, +-0, +-1e-30, +-100. At the avx512 level (kernels.test_matmul.
  // isa_avx512) bias_activation runs 16 lanes and unary_f32 8: their bits must agree.
  ThreadPool pool(2);
  using sampan::cpu::Activation;
  using sampan::cpu::UnaryKind;
  const float edges[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, -1e-30f, 100.0f, -100.0f};
  for (int64_t n : {1000, 13, 8, 3, 16, 17, 31}) {
    const int64_t rows = 5;
    std::vector<float> x(static_cast<size_t>(rows * n)), bias(static_cast<size_t>(n));
    for (int64_t i = 0; i < rows * n; ++i)
      x[static_cast<size_t>(i)] = i % 97 == 5 ? edges[(i / 97) % 9]
                                              : -12.0f + 24.0f * static_cast<float>((i * 37) % 1009) / 1008.0f;
    for (int64_t j = 0; j < n; ++j) bias[static_cast<size_t>(j)] = 0.03f * static_cast<float>(j % 11) - 0.1f;
    for (const auto& [act, kind] : {std::pair{Activation::kGelu, UnaryKind::kGelu},
                                    std::pair{Activation::kGeluTanh, UnaryKind::kGeluTanh}}) {
      std::vector<float> fused = x;
      sampan::cpu::bias_activation(rows, n, fused.data(), n, 1.0f, bias.data(), act, pool);
      std::vector<float> z(x.size()), unfused(x.size());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j)
          z[static_cast<size_t>(i * n + j)] = x[static_cast<size_t>(i * n + j)] + bias[static_cast<size_t>(j)];
      sampan::cpu::UnaryParams p;
      p.kind = kind;
      sampan::cpu::unary_f32(p, z.data(), unfused.data(), rows * n, pool);
      int bad = 0;
      for (size_t u = 0; u < x.size(); ++u) {
        const bool same = fused[u] == unfused[u] || (std::isnan(fused[u]) && std::isnan(unfused[u]));
        if (!same && bad++ < 5) {
          FAIL_CHECK("n " << n << " act " << static_cast<int>(act) << " at " << u << ": fused "
                          << fused[u] << ", unfused " << unfused[u]);
        }
      }
      CHECK(bad == 0);
    }
  }
}

// Intel cores take a microcode assist for every subnormal result, so the vector exp clamps its
// input at -87.3, where e^x is still a normal f32 (n = -126 leaves r >= 0.036, p > 1): no input
// near the clamp gives a subnormal (a narrow band of them was suspected in stop 56's note), and
// below it the result is e^-87.3. Every f32 in [-90, -80]; silu through the same exp on [80, 90]
// and the negated range.
TEST_CASE("unary exp and silu give no subnormal result near the exp clamp", "[matmul]") {
  ThreadPool pool(2);
  std::vector<float> x;
  for (float v = -90.0f; v <= -80.0f; v = std::nextafter(v, 0.0f)) x.push_back(v);
  std::vector<float> y(x.size());
  sampan::cpu::UnaryParams p;
  p.kind = sampan::cpu::UnaryKind::kExp;
  sampan::cpu::unary_f32(p, x.data(), y.data(), static_cast<int64_t>(x.size()), pool);
  const double floor_value = std::exp(static_cast<double>(-87.3f));  // the f32 clamp
  int subnormal = 0, off = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fpclassify(y[i]) == FP_SUBNORMAL || y[i] == 0.0f) ++subnormal;
    // At or below the clamp the result is e^-87.3 (its f32, a few ulp); above it, e^x.
    const double want = std::max(std::exp(static_cast<double>(x[i])), floor_value);
    if (std::fabs(y[i] - want) > 1e-6 * want) ++off;
  }
  CHECK(subnormal == 0);
  CHECK(off == 0);
  for (float sign : {1.0f, -1.0f}) {
    std::vector<float> z(x.size()), s(x.size());
    for (size_t i = 0; i < x.size(); ++i) z[i] = -sign * x[i];  // [80, 90], then [-90, -80]
    p.kind = sampan::cpu::UnaryKind::kSilu;
    sampan::cpu::unary_f32(p, z.data(), s.data(), static_cast<int64_t>(z.size()), pool);
    int bad = 0;
    for (size_t i = 0; i < z.size(); ++i) {
      // silu(v) = v / (1 + e^-v): v itself above 80; below -80 v e^v, under 1e-32 in magnitude
      // (the clamp makes it v e^-87.3 there).
      const bool ok = sign > 0 ? std::fabs(s[i] - z[i]) <= 1e-6f * z[i]
                               : std::fpclassify(s[i]) != FP_SUBNORMAL && s[i] <= 0.0f &&
                                     s[i] > -1e-32f;
      if (!ok) ++bad;
    }
    CHECK(bad == 0);
  }
}

// The packed-B GEMM (sgemm_packed_cpu.h) against double sums, over sizes that cut every
// blocking: m around the 6-row tile and the 144-row task chunk, n around the 16/64-column
// strips, k around the 128-row panel chunk; both orientations of b, padded row strides, every
// epilogue, both panel widths (the one this ISA level does not run goes through the regrouping
// path) and a serial and a threaded runner (the result must not depend on it: compared bit for
// bit).
TEST_CASE("sgemm_packed matches double sums over awkward sizes", "[matmul]") {
  using sampan::cpu::Activation;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  sampan::cpu::SerialRunner serial;
  ThreadPool pool(3);
  struct Case {
    int64_t m, n, k;
  };
  const std::vector<Case> cases = {{1, 1, 1},     {5, 17, 3},    {6, 64, 128},  {7, 65, 129},
                                   {13, 130, 300}, {143, 63, 64}, {145, 16, 257}, {290, 80, 33},
                                   {2, 200, 700}};
  int checked = 0;
  for (const Case& c : cases) {
    for (bool trans : {false, true}) {
      const int64_t lda = c.k + 3, ldy = c.n + 2, ldb = trans ? c.k + 1 : c.n + 1;
      std::vector<float> a(static_cast<size_t>(c.m * lda)), b(static_cast<size_t>((trans ? c.n : c.k) * ldb));
      std::vector<float> bias(static_cast<size_t>(c.n));
      for (float& v : a) v = d(rng);
      for (float& v : b) v = d(rng);
      for (float& v : bias) v = d(rng);
      auto b_at = [&](int64_t kk, int64_t j) {
        return static_cast<double>(trans ? b[static_cast<size_t>(j * ldb + kk)] : b[static_cast<size_t>(kk * ldb + j)]);
      };
      for (int nr : {16, 64}) {
        std::vector<float> packed(static_cast<size_t>(sampan::cpu::sgemm_packed_size(c.k, c.n, nr)), -7.0f);
        sampan::cpu::sgemm_pack_b(b.data(), c.k, c.n, ldb, trans, nr, packed.data(), pool);
        for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kGelu}) {
          const float alpha = act == Activation::kNone ? 1.0f : 0.75f;
          const float* bp = act == Activation::kNone ? nullptr : bias.data();
          std::vector<float> y1(static_cast<size_t>(c.m * ldy), 99.0f), y2 = y1;
          sampan::cpu::sgemm_packed(c.m, c.n, c.k, a.data(), lda, packed.data(), nr, alpha, bp, act,
                                    y1.data(), ldy, serial);
          sampan::cpu::sgemm_packed(c.m, c.n, c.k, a.data(), lda, packed.data(), nr, alpha, bp, act,
                                    y2.data(), ldy, pool);
          CHECK(y1 == y2);
          for (int64_t i = 0; i < c.m; ++i) {
            for (int64_t j = 0; j < ldy; ++j) {
              const float got = y1[static_cast<size_t>(i * ldy + j)];
              if (j >= c.n) {  // past the row: never written
                CHECK(got == 99.0f);
                continue;
              }
              double s = 0, mag = 0;
              for (int64_t kk = 0; kk < c.k; ++kk) {
                const double p = static_cast<double>(a[static_cast<size_t>(i * lda + kk)]) * b_at(kk, j);
                s += p;
                mag += std::abs(p);
              }
              double v = alpha * s + (bp ? bp[j] : 0.0);
              if (act == Activation::kRelu) v = std::max(v, 0.0);
              if (act == Activation::kGelu) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
              // f32 sums in k order within 128-row chunks: well under 1e-6 of sum |a||b| for
              // these k; gelu's erf approximation adds up to 6e-7 absolute.
              INFO("m " << c.m << " n " << c.n << " k " << c.k << " trans " << trans << " nr " << nr
                        << " act " << static_cast<int>(act) << " at " << i << "," << j);
              CHECK(std::abs(got - v) <= 1e-6 * (mag + 1.0) + 2e-7 * std::abs(v));
              ++checked;
            }
          }
        }
      }
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("matmul speed on BERT-base shapes", "[.][bench]") {
  std::mt19937 rng(12);
  ThreadPool pool(0);
  struct Shape2 {
    const char* what;
    Shape a, b;
    bool trans_b;
    std::string act;
  };
  const std::vector<Shape2> shapes = {
      {"qkv/out proj", {1, 128, 768}, {768, 768}, false, "none"},
      {"ffn up + gelu", {1, 128, 768}, {768, 3072}, false, "gelu"},
      {"ffn down", {1, 128, 3072}, {3072, 768}, false, "none"},
      {"ffn up, trans_b", {1, 128, 768}, {3072, 768}, true, "none"},
      {"ffn up, B=4", {4, 128, 768}, {768, 3072}, false, "none"},
      {"q.kT", {1, 12, 128, 64}, {1, 12, 64, 128}, false, "none"},
      {"p.v", {1, 12, 128, 128}, {1, 12, 128, 64}, false, "none"},
      {"q.kT B=8", {8, 12, 128, 64}, {8, 12, 64, 128}, false, "none"},
  };
  for (const Shape2& s : shapes) {
    Graph g;
    std::vector<Dim> dims;
    for (int64_t d : s.a) dims.push_back(Dim::fixed(d));
    const ValueId a = g.add_input("a", DType::kF32, dims);
    const bool batched = s.b.size() > 2;
    ValueId b;
    std::map<std::string, Tensor> in{{"a", random_f32(s.a, rng)}};
    if (batched) {
      std::vector<Dim> bd;
      for (int64_t d : s.b) bd.push_back(Dim::fixed(d));
      b = g.add_input("b", DType::kF32, bd);
      in["b"] = random_f32(s.b, rng);
    } else {
      b = g.add_constant("b", random_f32(s.b, rng));
    }
    g.mark_output(
        g.add("matmul", "mm", {a, b}, {{"trans_b", int64_t{s.trans_b}}, {"activation", s.act}}));
    Executor ex(g, pool);
    ex.run(in);
    const int64_t k = s.a.back();
    const int64_t n = s.trans_b ? s.b[0] : s.b.back();
    const double flops =
        2.0 * static_cast<double>(shape_numel(s.a) / k) * k * n * (batched ? 1.0 : 1.0);
    int reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double secs = 0;
    while (secs < 0.5 || reps < 3) {
      ex.run(in);
      ++reps;
      secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (!batched && !s.trans_b) {  // the bare GEMM on pre-transposed weights, for reference
      const Tensor bt = random_f32({n, k}, rng);
      Graph gl;
      const ValueId x =
          gl.add_input("x", DType::kF32, {Dim::fixed(shape_numel(s.a) / k), Dim::fixed(k)});
      gl.mark_output(gl.add("linear", "lin", {x, gl.add_constant("w", bt)}));
      Executor el(gl, pool);
      const std::map<std::string, Tensor> lin{{"x", in["a"].reshape({shape_numel(s.a) / k, k})}};
      el.run(lin);
      int lr = 0;
      const auto l0 = std::chrono::steady_clock::now();
      double ls = 0;
      while (ls < 0.5 || lr < 3) {
        el.run(lin);
        ++lr;
        ls = std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count();
      }
      std::printf("  (linear, same GEMM: %8.3f ms  %7.1f GFLOP/s)\n", 1e3 * ls / lr,
                  flops * lr / ls * 1e-9);
    }
    std::printf("%-18s %-18s x %-16s %8.3f ms  %7.1f GFLOP/s (%d threads)\n", s.what,
                shape_str(s.a).c_str(), shape_str(s.b).c_str(), 1e3 * secs / reps,
                flops * reps / secs * 1e-9, pool.concurrency());
    CHECK(secs > 0);
  }
}

// The two ways to run attention's batched products on the GEMM, timed side by side: items in
// parallel (one worker each, serial GEMM) versus items one after another (GEMM on all workers).
// matmul takes the first when there are at least as many items as workers.
TEST_CASE("batched GEMM policy for attention shapes", "[.][bench]") {
  std::mt19937 rng(13);
  ThreadPool pool(0);
  const int64_t items = 12, m = 128;
  for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{{64, 128}, {128, 64}}) {
    const Tensor a = random_f32({items, m, k}, rng), w = random_f32({items, n, k}, rng);
    Tensor y = Tensor::empty({items, m, n}, DType::kF32);
    auto one = [&](int64_t t, sampan::cpu::TaskRunner& r) {
      sampan::cpu::GemmWeights g;
      g.k = k;
      g.n_blocks = 1;
      g.data[0] = w.data<float>() + t * n * k;
      g.rows[0] = n;
      sampan::cpu::gemm(m, a.data<float>() + t * m * k, k, g, sampan::cpu::GemmEpilogue::kStore,
                        y.data<float>() + t * m * n, n, r);
    };
    auto time = [&](const std::function<void()>& f) {
      f();
      int reps = 0;
      const auto t0 = std::chrono::steady_clock::now();
      double secs = 0;
      while (secs < 0.3 || reps < 3) {
        f();
        ++reps;
        secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      return secs / reps;
    };
    const double flops = 2.0 * items * m * n * k;
    const double par = time([&] {
      pool.run(items, [&](int64_t t) {
        sampan::cpu::SerialRunner serial;
        one(t, serial);
      });
    });
    const double seq = time([&] {
      for (int64_t t = 0; t < items; ++t) one(t, pool);
    });
    std::printf(
        "12 x [128, %ld] x [%ld, %ld]: items in parallel %.3f ms (%.1f GFLOP/s), "
        "items in turn %.3f ms (%.1f GFLOP/s)\n",
        static_cast<long>(k), static_cast<long>(k), static_cast<long>(n), par * 1e3,
        flops / par * 1e-9, seq * 1e3, flops / seq * 1e-9);
    CHECK(par > 0);
  }
}
