// conv2d and pool2d CPU kernels against plain double-precision loops written here, over awkward
// sizes (odd planes, asymmetric pads, strides, dilations, groups, depthwise, ResNet's stem),
// with every register tile the CPU can run and over serial, pooled and wide runners.
//
// Tolerance: the kernels sum f32 products in f32, so the error is f32 summation error relative
// to sum |x| |w| over the taps (plus |bias| + |residual|): ~k * 2^-24 in the worst case, far
// less in practice. 1e-4 of that scale leaves room for k up to a few thousand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/pool_cpu.h"
#include "tests/kernels/kernel_test_util.h"

using namespace sampan::cpu;

namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double act_ref(const ConvEpilogue& ep, double v) {
  switch (ep.act) {
    case ConvActivation::kNone: return v;
    case ConvActivation::kRelu: return std::max(v, 0.0);
    case ConvActivation::kClip: return std::min(std::max(v, double{ep.act_min}), double{ep.act_max});
    case ConvActivation::kSigmoid: return 1.0 / (1.0 + std::exp(-v));
    case ConvActivation::kHardSwish: return v * std::min(std::max(v / 6.0 + 0.5, 0.0), 1.0);
  }
  return v;
}

// y and the error scale sum |x||w| + |bias| + |residual| of every output.
void conv_ref(const ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
              const float* bias, const float* res, const ConvEpilogue& ep,
              std::vector<double>& y, std::vector<double>& scale) {
  const int64_t ho = s.out_h(), wo = s.out_w();
  const int64_t cg = s.c / s.group, og = s.o / s.group;
  y.assign(static_cast<size_t>(s.n * s.o * ho * wo), 0.0);
  scale = y;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          const int64_t g = o / og;
          double acc = bias ? bias[o] : 0.0;
          double sc = bias ? std::fabs(bias[o]) : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < s.kh; ++ky)
              for (int64_t kx = 0; kx < s.kw; ++kx) {
                const int64_t iy = oy * s.stride_h - s.pad_t + ky * s.dil_h;
                const int64_t ix = ox * s.stride_w - s.pad_l + kx * s.dil_w;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                const double xv = x[static_cast<size_t>(((n * s.c + g * cg + ci) * s.h + iy) * s.w + ix)];
                const double wv = w[static_cast<size_t>(((o * cg + ci) * s.kh + ky) * s.kw + kx)];
                acc += xv * wv;
                sc += std::fabs(xv * wv);
              }
          const size_t i = static_cast<size_t>(((n * s.o + o) * ho + oy) * wo + ox);
          if (res) {
            acc += res[i];
            sc += std::fabs(res[i]);
          }
          y[i] = act_ref(ep, acc);
          scale[i] = std::max(sc, 1e-3);
        }
}

struct ConvCase {
  std::string name;
  ConvShape s;
  bool bias = false;
  bool residual = false;
  ConvEpilogue ep;
};

ConvShape shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw) {
  ConvShape s;
  s.n = n, s.c = c, s.h = h, s.w = w, s.o = o, s.kh = kh, s.kw = kw;
  return s;
}

std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> cs;
  ConvEpilogue relu{ConvActivation::kRelu};
  {
    ConvCase c{"1x1", shape(1, 19, 7, 9, 13, 1, 1)};
    cs.push_back(c);
  }
  {
    ConvCase c{"1x1 wide plane, bias, relu", shape(2, 40, 23, 21, 24, 1, 1), true, false, relu};
    cs.push_back(c);
  }
  {
    ConvCase c{"3x3 pad 1 odd plane, bias, residual, relu", shape(1, 16, 13, 11, 17, 3, 3), true,
               true, relu};
    c.s.pad_t = c.s.pad_l = c.s.pad_b = c.s.pad_r = 1;
    cs.push_back(c);
  }
  {
    ConvCase c{"3x3 asymmetric pads stride 2", shape(3, 5, 15, 14, 11, 3, 3)};
    c.s.pad_t = 0, c.s.pad_l = 2, c.s.pad_b = 1, c.s.pad_r = 0;
    c.s.stride_h = c.s.stride_w = 2;
    cs.push_back(c);
  }
  {
    ConvCase c{"3x2 dilation 2 stride (1, 2), clip", shape(2, 6, 12, 17, 9, 3, 2), true};
    c.s.dil_h = c.s.dil_w = 2;
    c.s.stride_w = 2;
    c.s.pad_t = 2, c.s.pad_l = 1, c.s.pad_b = 1, c.s.pad_r = 3;
    c.ep = {ConvActivation::kClip, -0.5f, 0.75f};
    cs.push_back(c);
  }
  {
    ConvCase c{"groups 2, hard_swish", shape(2, 8, 9, 10, 12, 3, 3), true, true,
               {ConvActivation::kHardSwish}};
    c.s.group = 2;
    c.s.pad_t = c.s.pad_l = c.s.pad_b = c.s.pad_r = 1;
    cs.push_back(c);
  }
  {
    ConvCase c{"depthwise 3x3 stride 2, sigmoid", shape(2, 10, 11, 13, 10, 3, 3), true, true,
               {ConvActivation::kSigmoid}};
    c.s.group = 10;
    c.s.stride_h = c.s.stride_w = 2;
    c.s.pad_t = c.s.pad_l = 1, c.s.pad_b = 0, c.s.pad_r = 2;
    cs.push_back(c);
  }
  {
    ConvCase c{"depthwise multiplier 2, dilation 2", shape(1, 4, 9, 8, 8, 3, 3), true};
    c.s.group = 4;
    c.s.dil_h = c.s.dil_w = 2;
    c.s.pad_t = c.s.pad_l = c.s.pad_b = c.s.pad_r = 2;
    cs.push_back(c);
  }
  {
    ConvCase c{"7x7 stride 2 pad 3 (ResNet stem), relu", shape(1, 3, 45, 39, 16, 7, 7), true,
               false, relu};
    c.s.stride_h = c.s.stride_w = 2;
    c.s.pad_t = c.s.pad_l = c.s.pad_b = c.s.pad_r = 3;
    cs.push_back(c);
  }
  {
    // k = 600 > the kernel's k chunk: partial sums over chunks plus the residual epilogue.
    ConvCase c{"3x3 deep k chunks, residual", shape(2, 67, 7, 7, 70, 3, 3), true, true, relu};
    c.s.pad_t = c.s.pad_l = c.s.pad_b = c.s.pad_r = 1;
    cs.push_back(c);
  }
  {
    ConvCase c{"1x1 stride 2 (downsample), sigmoid", shape(1, 33, 14, 14, 40, 1, 1), true, false,
               {ConvActivation::kSigmoid}};
    c.s.stride_h = c.s.stride_w = 2;
    cs.push_back(c);
  }
  {
    // A 14x14 plane (7 column panels, a one-panel sliver) with many channels: the split search
    // for small planes (column tiles and channel chunks), k = 360 in two even chunks.
    ConvCase c{"3x3 14x14 plane, 200 channels, residual", shape(1, 40, 14, 14, 200, 3, 3), true,
               true, relu};
    c.s.pad_t = c.s.pad_l = c.s.pad_b = c.s.pad_r = 1;
    cs.push_back(c);
  }
  return cs;
}

}  // namespace

TEST_CASE("conv2d matches a double-precision direct loop", "[conv]") {
  struct ChoiceRestore {
    ~ChoiceRestore() { set_conv_kernel(ConvKernelChoice::kAuto); }
  } restore;
  Runners runners;
  std::mt19937 rng(7);
  for (const ConvCase& cc : conv_cases()) {
    const ConvShape& s = cc.s;
    const int64_t ho = s.out_h(), wo = s.out_w();
    const std::vector<float> x = random_vec(static_cast<size_t>(s.n * s.c * s.h * s.w), rng);
    const std::vector<float> w =
        random_vec(static_cast<size_t>(s.o * (s.c / s.group) * s.kh * s.kw), rng);
    const std::vector<float> bias = random_vec(static_cast<size_t>(s.o), rng);
    const std::vector<float> res = random_vec(static_cast<size_t>(s.n * s.o * ho * wo), rng);
    const float* bp = cc.bias ? bias.data() : nullptr;
    const float* rp = cc.residual ? res.data() : nullptr;
    std::vector<double> want, scale;
    conv_ref(s, x, w, bp, rp, cc.ep, want, scale);
    for (ConvKernelChoice kc : {ConvKernelChoice::kAuto, ConvKernelChoice::kAvx2,
                                ConvKernelChoice::kAvx512}) {
      if (!conv_kernel_available(kc)) continue;
      set_conv_kernel(kc);
      for (auto [rname, runner] : runners.all()) {
        INFO(cc.name << " tile " << static_cast<int>(kc) << " runner " << rname);
        std::vector<float> y(want.size(), std::nanf(""));
        conv2d(s, x.data(), w.data(), bp, rp, cc.ep, y.data(), *runner);
        double worst = 0.0;
        for (size_t i = 0; i < y.size(); ++i) {
          worst = std::max(worst, std::fabs(y[i] - want[i]) / scale[i]);
          if (std::isnan(y[i])) worst = 1e9;
        }
        CHECK(worst <= 1e-4);
      }
    }
  }
}

TEST_CASE("conv2d gives the same bits on every runner", "[conv]") {
  Runners runners;
  std::mt19937 rng(11);
  ConvShape s = shape(2, 24, 20, 19, 30, 3, 3);
  s.pad_t = s.pad_l = s.pad_b = s.pad_r = 1;
  const std::vector<float> x = random_vec(static_cast<size_t>(s.n * s.c * s.h * s.w), rng);
  const std::vector<float> w = random_vec(static_cast<size_t>(s.o * s.c * 9), rng);
  const size_t ny = static_cast<size_t>(s.n * s.o * s.out_h() * s.out_w());
  std::vector<float> first;
  for (auto [rname, runner] : runners.all()) {
    std::vector<float> y(ny);
    conv2d(s, x.data(), w.data(), nullptr, nullptr, {}, y.data(), *runner);
    if (first.empty()) first = y;
    INFO(rname);
    CHECK(y == first);
  }
}

namespace {

// ONNX MaxPool / AveragePool on one output element per loop, straight from the definition.
std::vector<double> pool_ref(const PoolShape& s, const std::vector<float>& x) {
  std::vector<double> y(static_cast<size_t>(s.n * s.c * s.ho * s.wo));
  for (int64_t p = 0; p < s.n * s.c; ++p)
    for (int64_t oy = 0; oy < s.ho; ++oy)
      for (int64_t ox = 0; ox < s.wo; ++ox) {
        double m = -INFINITY, sum = 0.0;
        int64_t valid = 0, padded = 0;
        for (int64_t ky = 0; ky < s.kh; ++ky)
          for (int64_t kx = 0; kx < s.kw; ++kx) {
            const int64_t iy = oy * s.stride_h - s.pad_t + ky * s.dil_h;
            const int64_t ix = ox * s.stride_w - s.pad_l + kx * s.dil_w;
            if (iy >= -s.pad_t && iy < s.h + s.pad_b && ix >= -s.pad_l && ix < s.w + s.pad_r) {
              ++padded;
            }
            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
            const double v = x[static_cast<size_t>((p * s.h + iy) * s.w + ix)];
            m = std::max(m, v);
            sum += v;
            ++valid;
          }
        const int64_t count = s.count_include_pad ? padded : valid;
        y[static_cast<size_t>((p * s.ho + oy) * s.wo + ox)] =
            s.kind == PoolKind::kMax ? m : sum / static_cast<double>(count);
      }
  return y;
}

}  // namespace

TEST_CASE("pool2d matches ONNX pooling", "[pool]") {
  Runners runners;
  std::mt19937 rng(3);
  struct Case {
    const char* name;
    PoolShape s;
  };
  std::vector<Case> cases;
  auto make = [](PoolKind kind, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t pad,
                 int64_t ho, int64_t wo) {
    PoolShape s;
    s.kind = kind;
    s.n = 2, s.c = 3, s.h = h, s.w = w, s.kh = k, s.kw = k, s.stride_h = s.stride_w = stride;
    s.pad_t = s.pad_l = s.pad_b = s.pad_r = pad;
    s.ho = ho, s.wo = wo;
    return s;
  };
  // ResNet's max pool: 3x3 stride 2 pad 1 on 112 -> 56 (here 15 -> 8).
  cases.push_back({"max 3x3 s2 p1", make(PoolKind::kMax, 15, 15, 3, 2, 1, 8, 8)});
  // ceil_mode: 8 with 3x3 stride 2 no pads: floor 3, ceil 4 (last window half outside).
  cases.push_back({"max ceil_mode", make(PoolKind::kMax, 8, 9, 3, 2, 0, 4, 4)});
  cases.push_back({"avg ceil_mode exclude pad", make(PoolKind::kAvg, 8, 9, 3, 2, 0, 4, 4)});
  PoolShape inc = make(PoolKind::kAvg, 7, 10, 3, 2, 1, 4, 5);
  inc.count_include_pad = true;
  cases.push_back({"avg count_include_pad", inc});
  PoolShape inc_ceil = make(PoolKind::kAvg, 8, 8, 3, 2, 1, 5, 5);  // ceil: (8+2-3)/2 -> 4.5 -> 5
  inc_ceil.count_include_pad = true;
  cases.push_back({"avg count_include_pad ceil_mode", inc_ceil});
  cases.push_back({"avg exclude pad", make(PoolKind::kAvg, 7, 10, 3, 2, 1, 4, 5)});
  PoolShape dil = make(PoolKind::kMax, 11, 12, 3, 1, 2, 11, 12);
  dil.dil_h = dil.dil_w = 2;
  dil.pad_b = 1, dil.pad_r = 3;
  dil.ho = (11 + 2 + 1 - 4 - 1) / 1 + 1, dil.wo = (12 + 2 + 3 - 4 - 1) + 1;
  cases.push_back({"max dilation 2 asymmetric pads", dil});
  PoolShape gavg = make(PoolKind::kAvg, 7, 7, 7, 1, 0, 1, 1);
  cases.push_back({"global avg", gavg});
  PoolShape gmax = make(PoolKind::kMax, 5, 9, 1, 1, 0, 1, 1);
  gmax.kh = 5, gmax.kw = 9;
  cases.push_back({"global max", gmax});
  for (const Case& c : cases) {
    const PoolShape& s = c.s;
    const std::vector<float> x = random_vec(static_cast<size_t>(s.n * s.c * s.h * s.w), rng);
    const std::vector<double> want = pool_ref(s, x);
    for (auto [rname, runner] : runners.all()) {
      INFO(c.name << " runner " << rname);
      std::vector<float> y(want.size(), std::nanf(""));
      pool2d(s, x.data(), y.data(), *runner);
      double worst = 0.0;
      for (size_t i = 0; i < y.size(); ++i) {
        worst = std::max(worst, std::isnan(y[i]) ? 1e9 : std::fabs(y[i] - want[i]));
      }
      CHECK(worst <= 1e-6);
    }
  }
}
