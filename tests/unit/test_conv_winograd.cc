// The Winograd F(4x4, 3x3) conv (kernels/cpu/conv_winograd_cpu.h) against a double-precision
// direct convolution written here, at every block this CPU runs, on awkward plane sizes (tiles
// hanging past the edges), padded channel blocks, batches 1-3 and every epilogue; and the layout
// pass's choice of it (engine/graph/passes/layout_passes.h) with SAMPAN_CONV_WINOGRAD.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/layout_passes.h"
#include "engine/graph/passes/passes.h"
#include "engine/ops/conv2d_nchwc.h"
#include "engine/ops/conv2d_winograd.h"
#include "kernels/cpu/conv_winograd_cpu.h"

using namespace sampan;
using namespace sampan::cpu;

namespace {

std::vector<float> random_vec(int64_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// [n, c, hw] -> [n, ceil(c / b), hw, b], zeros in the padded channels.
std::vector<float> to_blocked(const std::vector<float>& x, int64_t n, int64_t c, int64_t hw,
                              int64_t b) {
  const int64_t cb = ceil_div(c, b);
  std::vector<float> y(static_cast<size_t>(n * cb * hw * b), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < hw; ++p) {
        y[static_cast<size_t>(((i * cb + ch / b) * hw + p) * b + ch % b)] =
            x[static_cast<size_t>((i * c + ch) * hw + p)];
      }
    }
  }
  return y;
}

double activate(double v, const ConvEpilogue& ep) {
  switch (ep.act) {
    case ConvActivation::kNone: return v;
    case ConvActivation::kRelu: return std::max(v, 0.0);
    case ConvActivation::kClip:
      return std::min(std::max(v, double{ep.act_min}), double{ep.act_max});
    case ConvActivation::kSigmoid: return 1.0 / (1.0 + std::exp(-v));
    case ConvActivation::kHardSwish: return v * std::min(std::max(v / 6.0 + 0.5, 0.0), 1.0);
  }
  return v;
}

struct Case {
  int64_t n, c, h, w, o;
  int64_t pt, pl, pb, pr;
};

// Runs one case and returns the largest error of a real output relative to sum |x||w| over its
// taps (+ |bias| + |residual|), the scale of f32 rounding in any summation order.
double run_case(const Case& k, const ConvEpilogue& ep, bool with_bias, bool with_res,
                int64_t block, TaskRunner& runner, std::mt19937& rng) {
  WinogradConvShape s;
  s.n = k.n;
  s.in_blocks = ceil_div(k.c, block);
  s.h = k.h;
  s.w = k.w;
  s.out_blocks = ceil_div(k.o, block);
  s.block = block;
  s.pad_t = k.pt;
  s.pad_l = k.pl;
  s.pad_b = k.pb;
  s.pad_r = k.pr;
  const int64_t ho = s.out_h(), wo = s.out_w();
  const std::vector<float> x = random_vec(k.n * k.c * k.h * k.w, rng);
  const std::vector<float> w = random_vec(k.o * k.c * 9, rng);
  const std::vector<float> bias = random_vec(k.o, rng);
  const std::vector<float> res = random_vec(k.n * k.o * ho * wo, rng);
  std::vector<float> u(static_cast<size_t>(winograd_weight_floats(k.o, k.c, block)));
  winograd_transform_weights(k.o, k.c, block, w.data(), u.data());
  std::vector<float> bias_b(static_cast<size_t>(s.out_blocks * block), 0.0f);
  std::copy(bias.begin(), bias.end(), bias_b.begin());
  const std::vector<float> xb = to_blocked(x, k.n, k.c, k.h * k.w, block);
  const std::vector<float> rb = to_blocked(res, k.n, k.o, ho * wo, block);
  std::vector<float> yb(static_cast<size_t>(k.n * s.out_blocks * ho * wo * block), NAN);
  conv2d_winograd(s, xb.data(), u.data(), with_bias ? bias_b.data() : nullptr,
                  with_res ? rb.data() : nullptr, ep, yb.data(), runner);

  double worst = 0.0;
  for (int64_t i = 0; i < k.n; ++i) {
    for (int64_t oc = 0; oc < k.o; ++oc) {
      for (int64_t oy = 0; oy < ho; ++oy) {
        for (int64_t ox = 0; ox < wo; ++ox) {
          double acc = with_bias ? bias[static_cast<size_t>(oc)] : 0.0;
          double mag = std::abs(acc);
          for (int64_t ic = 0; ic < k.c; ++ic) {
            const float* wr = w.data() + (oc * k.c + ic) * 9;
            const float* xp = x.data() + (i * k.c + ic) * k.h * k.w;
            for (int64_t ky = 0; ky < 3; ++ky) {
              const int64_t iy = oy - k.pt + ky;
              if (iy < 0 || iy >= k.h) continue;
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t ix = ox - k.pl + kx;
                if (ix < 0 || ix >= k.w) continue;
                const double p = double{xp[iy * k.w + ix]} * wr[ky * 3 + kx];
                acc += p;
                mag += std::abs(p);
              }
            }
          }
          const size_t ri = static_cast<size_t>(((i * k.o + oc) * ho + oy) * wo + ox);
          if (with_res) {
            acc += res[ri];
            mag += std::abs(res[ri]);
          }
          const double want = activate(acc, ep);
          const double got = yb[static_cast<size_t>(
              (((i * s.out_blocks + oc / block) * ho + oy) * wo + ox) * block + oc % block)];
          const double err = std::abs(got - want) / std::max(mag, 1e-30);
          if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
        }
      }
    }
  }
  return worst;
}

std::vector<int64_t> blocks_here() {
  std::vector<int64_t> out;
  for (int64_t b : {int64_t{8}, int64_t{16}}) {
    if (winograd_available(b)) out.push_back(b);
  }
  return out;
}

}  // namespace

// Tolerance: the F(4x4, 3x3) transforms scale values by up to 8 (A), 5 (B) and 1/24 (G) before
// and after the f32 GEMM, so an output's rounding error is a few times the direct conv's;
// measured up to ~2e-6 of sum |x||w| here (direct: ~5e-7). 1e-5 leaves 5x margin and still
// fails on any misplaced tap (an error of order |x||w| / sum |x||w| >= 1/(9 c)).
constexpr double kWinogradTol = 1e-5;

TEST_CASE("conv2d_winograd matches a double direct convolution", "[conv_winograd]") {
  const std::vector<int64_t> blocks = blocks_here();
  if (blocks.empty()) {
    WARN("no Winograd kernel on this CPU");
    return;
  }
  ThreadPool pool(2);
  std::mt19937 rng(3);
  ConvEpilogue relu;
  relu.act = ConvActivation::kRelu;
  const std::vector<Case> cases = {
      // n, c, h, w, o, pads t l b r
      {1, 16, 7, 7, 16, 1, 1, 1, 1},      // ResNet's last plane size: 2x2 tiles, 1 in the plane
      {2, 20, 13, 13, 40, 1, 1, 1, 1},    // c and o padded to the block, 13 = 3 tiles + 1
      {3, 64, 14, 14, 33, 1, 1, 1, 1},    // batch 3: tile groups span images
      {1, 48, 29, 29, 64, 1, 1, 1, 1},
      {1, 64, 56, 56, 64, 1, 1, 1, 1},    // ResNet's first stage
      {1, 512, 7, 7, 24, 1, 1, 1, 1},     // long sums
      {1, 32, 9, 17, 24, 0, 1, 2, 1},     // asymmetric pads
      {2, 24, 5, 6, 16, 0, 0, 0, 0},      // no pads, one tile row
      {1, 16, 3, 3, 16, 2, 2, 2, 2},      // pads wider than the plane's interior
  };
  double worst = 0.0;
  for (int64_t block : blocks) {
    for (const Case& k : cases) {
      INFO("block " << block << ": n " << k.n << " c " << k.c << " " << k.h << "x" << k.w << " o "
                    << k.o << " pads " << k.pt << k.pl << k.pb << k.pr);
      const double err = run_case(k, relu, true, true, block, pool, rng);
      CHECK(err <= kWinogradTol);
      const double plain = run_case(k, ConvEpilogue{}, false, false, block, pool, rng);
      CHECK(plain <= kWinogradTol);
      worst = std::max({worst, err, plain});
    }
  }
  WARN("largest error of conv2d_winograd relative to sum |x||w|: " << worst);
}

TEST_CASE("conv2d_winograd applies every epilogue, on any runner", "[conv_winograd]") {
  const std::vector<int64_t> blocks = blocks_here();
  if (blocks.empty()) {
    WARN("no Winograd kernel on this CPU");
    return;
  }
  std::vector<ConvEpilogue> eps(4);
  eps[0].act = ConvActivation::kClip;
  eps[0].act_min = -0.5f;
  eps[0].act_max = 0.7f;
  eps[1].act = ConvActivation::kSigmoid;
  eps[2].act = ConvActivation::kHardSwish;
  ThreadPool pool(3);
  SerialRunner serial;
  std::mt19937 rng(4);
  for (int64_t block : blocks) {
    for (const ConvEpilogue& ep : eps) {
      INFO("block " << block << " activation " << static_cast<int>(ep.act));
      CHECK(run_case({2, 24, 11, 10, 20, 1, 1, 1, 1}, ep, true, true, block, pool, rng) <=
            kWinogradTol);
      CHECK(run_case({1, 16, 6, 9, 8, 1, 1, 1, 1}, ep, true, false, block, serial, rng) <=
            kWinogradTol);
    }
  }
}

namespace {

using namespace sampan::graph;

ValueId constant(Graph& g, const std::string& name, const Shape& shape, std::mt19937& rng) {
  return g.add_constant(name,
                        Tensor::from_f32(shape, random_vec(shape_numel(shape), rng, -0.3f, 0.3f)));
}

ValueId conv(Graph& g, const std::string& name, ValueId x, int64_t c, int64_t o, int64_t k,
             int64_t stride, int64_t pad, const std::string& act, std::mt19937& rng,
             ValueId residual = kNoValue) {
  std::vector<ValueId> in = {x, constant(g, name + ".w", {o, c, k, k}, rng),
                             constant(g, name + ".b", {o}, rng)};
  if (residual != kNoValue) in.push_back(residual);
  return g.add("conv2d", name, in,
               {{"strides", std::vector<int64_t>{stride, stride}},
                {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                {"activation", act}});
}

// A residual block on a 32-channel input: 3x3 stride 1 twice (the second with the residual),
// then a 3x3 stride 2 that stays direct.
Graph residual_block(std::mt19937& rng) {
  Graph g;
  const ValueId x = g.add_input(
      "x", DType::kF32, {Dim::sym("batch"), Dim::fixed(32), Dim::fixed(13), Dim::fixed(11)});
  const ValueId a = conv(g, "a", x, 32, 32, 3, 1, 1, "relu", rng);
  const ValueId b = conv(g, "b", a, 32, 32, 3, 1, 1, "relu", rng, x);
  g.mark_output(conv(g, "c", b, 32, 48, 3, 2, 1, "none", rng));
  return g;
}

std::vector<float> run_graph(const Graph& g, const Tensor& x) {
  ThreadPool pool(2);
  Executor ex(g, pool);
  const Tensor t = ex.run({{"x", x}})[0].contiguous();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

}  // namespace

TEST_CASE("choose_conv_layout sends 3x3 stride-1 convs to conv2d_winograd",
          "[conv_winograd][passes]") {
  if (!ops::winograd_runs(ops::nchwc_block())) {
    WARN("no Winograd kernel for this CPU's block");
    return;
  }
  std::mt19937 rng(8);
  const Tensor x = Tensor::from_f32({2, 32, 13, 11}, random_vec(2 * 32 * 13 * 11, rng));
  for (bool enabled : {true, false}) {
    INFO("SAMPAN_CONV_WINOGRAD " << (enabled ? "unset (the default: on at every block)" : "0"));
    Graph g = residual_block(rng);
    const std::vector<float> before = run_graph(g, x);
    if (enabled) {
      ::unsetenv("SAMPAN_CONV_WINOGRAD");
    } else {
      ::setenv("SAMPAN_CONV_WINOGRAD", "0", 1);
    }
    const int n = passes::choose_conv_layout(g);
    ::unsetenv("SAMPAN_CONV_WINOGRAD");
    CHECK(n == 3);
    g.compact();
    passes::OpHistogram ops = passes::op_histogram(g);
    CHECK(ops["conv2d_winograd"] == (enabled ? 2 : 0));
    CHECK(ops["conv2d_nchwc"] == (enabled ? 1 : 3));
    const std::vector<float> after = run_graph(g, x);
    REQUIRE(after.size() == before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      INFO("element " << i);
      CHECK(std::abs(after[i] - before[i]) <= 1e-4 * (1.0 + std::abs(before[i])));
    }
  }
}
