// bf16 precision for classic models (issue 16): cpu::conv2d_bf16 and cpu::matmul_bf16 against
// double-precision loops written here, on the vdpbf16ps tile (where the CPU has AVX512-BF16) and
// on the portable loop, over serial, pooled and wide runners; then the convert_precision_bf16
// pass and the ops end to end through a graph.
//
// Two references, two bounds (u = 2^-9, bf16's unit roundoff; S = sum |x||w| + |bias| +
// |residual| per output, the scale of f32 summation error):
//  - on the bf16-rounded inputs, in double: every bf16 x bf16 product is exact in f32, so the
//    only error left is f32 accumulation (and the f32 epilogue), at most k · 2^-24 · S to first
//    order. Asserted: |y - ref| <= (k · 2^-24 + 2^-22) · S, with k the taps of one output.
//  - on the unrounded f32 inputs: each product is off by at most (1 + u)^2 - 1 ~ 2^-8, so
//    |y - ref| <= (2^-8 + k · 2^-24) · S always (asserted); and the errors of independent
//    roundings add in quadrature, rms error ~ u · sqrt(2/3) · sqrt(sum (x w)^2), i.e. a relative
//    error ~ 2^-8 · sqrt(k) · rms |x w| / S. Asserted: rms error <= 2u · rms sqrt(sum (x w)^2)
//    over the outputs (measured ~0.4u · ..., printed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/passes.h"
#include "engine/graph/passes/precision_passes.h"
#include "kernels/common/half.h"
#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/isa.h"
#include "tests/kernels/kernel_test_util.h"

using namespace sampan;
using namespace sampan::cpu;

namespace {

constexpr double kU = 1.0 / 512;  // bf16 unit roundoff, 2^-9

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return out;
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

struct Ref {
  std::vector<double> y;
  std::vector<double> scale;  // S = sum |x w| + |bias| + |residual|
  std::vector<double> sq;     // sum (x w)^2
};

// x: [n, c, h, w]; w: [o, c/g, kh, kw]; bias [o] / res [n, o, ho, wo] or null.
Ref conv_ref(const ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
             const float* bias, const float* res, const ConvEpilogue& ep) {
  const int64_t ho = s.out_h(), wo = s.out_w();
  const int64_t cg = s.c / s.group, og = s.o / s.group;
  Ref r;
  r.y.assign(static_cast<size_t>(s.n * s.o * ho * wo), 0.0);
  r.scale = r.sq = r.y;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          const int64_t g = o / og;
          double acc = bias ? bias[o] : 0.0;
          double sc = bias ? std::fabs(bias[o]) : 0.0;
          double sq = 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < s.kh; ++ky)
              for (int64_t kx = 0; kx < s.kw; ++kx) {
                const int64_t iy = oy * s.stride_h - s.pad_t + ky * s.dil_h;
                const int64_t ix = ox * s.stride_w - s.pad_l + kx * s.dil_w;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                const double p = double{x[static_cast<size_t>(((n * s.c + g * cg + ci) * s.h + iy) * s.w + ix)]} *
                                 w[static_cast<size_t>(((o * cg + ci) * s.kh + ky) * s.kw + kx)];
                acc += p;
                sc += std::fabs(p);
                sq += p * p;
              }
          const size_t i = static_cast<size_t>(((n * s.o + o) * ho + oy) * wo + ox);
          if (res) {
            acc += res[i];
            sc += std::fabs(res[i]);
          }
          r.y[i] = act_ref(ep, acc);
          r.scale[i] = std::max(sc, 1e-3);
          r.sq[i] = sq;
        }
  return r;
}

struct Errors {
  double worst_exact = 0;  // max |y - ref(rounded)| / bound
  double worst_f32 = 0;    // max |y - ref(f32)| / bound
  double rms_ratio = 0;    // rms |y - ref(f32)| / (u · rms sqrt(sum (x w)^2))
  double max_rel = 0;      // max |y - ref(f32)| / max |ref(f32)|
};

Errors measure(const std::vector<float>& y, const Ref& exact, const Ref& f32, int64_t k) {
  Errors e;
  double se = 0, ssq = 0, ymax = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d_exact = std::fabs(y[i] - exact.y[i]);
    const double d_f32 = std::fabs(y[i] - f32.y[i]);
    e.worst_exact = std::max(e.worst_exact,
                             d_exact / ((k * std::ldexp(1.0, -24) + std::ldexp(1.0, -22)) *
                                        exact.scale[i]));
    e.worst_f32 = std::max(e.worst_f32,
                           d_f32 / ((2 * kU + k * std::ldexp(1.0, -24)) * f32.scale[i]));
    se += d_f32 * d_f32;
    ssq += f32.sq[i];
    ymax = std::max(ymax, std::fabs(f32.y[i]));
    e.max_rel = std::max(e.max_rel, d_f32);
  }
  e.rms_ratio = std::sqrt(se / y.size()) / (kU * std::sqrt(ssq / y.size()) + 1e-30);
  e.max_rel /= std::max(ymax, 1e-30);
  return e;
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

void pad_all(ConvShape& s, int64_t p) { s.pad_t = s.pad_l = s.pad_b = s.pad_r = p; }

// Every case has tails somewhere: k odd (the pair packing's last (b, 0) row), planes that are
// not a multiple of 32 pixels, channel counts that are not a multiple of 8.
std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> cs;
  const ConvEpilogue relu{ConvActivation::kRelu};
  cs.push_back({"1x1 k=19 odd, 7x9 plane", shape(1, 19, 7, 9, 13, 1, 1)});
  cs.push_back({"1x1 batch 2 k=40, 23x21 plane, bias, relu", shape(2, 40, 23, 21, 24, 1, 1), true,
                false, relu});
  {
    ConvCase c{"3x3 pad 1 k=144, bias, residual, relu", shape(1, 16, 13, 11, 17, 3, 3), true,
               true, relu};
    pad_all(c.s, 1);
    cs.push_back(c);
  }
  {
    ConvCase c{"3x3 k=45 odd, asymmetric pads, stride 2, batch 3", shape(3, 5, 15, 14, 11, 3, 3)};
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
    ConvCase c{"groups 2 (k=36 per group), hard_swish", shape(2, 8, 9, 10, 12, 3, 3), true, true,
               {ConvActivation::kHardSwish}};
    c.s.group = 2;
    pad_all(c.s, 1);
    cs.push_back(c);
  }
  {
    ConvCase c{"groups 3 (k=27 odd per group), sigmoid", shape(2, 9, 8, 7, 15, 3, 3), true, true,
               {ConvActivation::kSigmoid}};
    c.s.group = 3;
    pad_all(c.s, 1);
    cs.push_back(c);
  }
  {
    ConvCase c{"7x7 stride 2 pad 3 (ResNet stem, k=147 odd), relu", shape(1, 3, 45, 39, 16, 7, 7),
               true, false, relu};
    c.s.stride_h = c.s.stride_w = 2;
    pad_all(c.s, 3);
    cs.push_back(c);
  }
  {
    // k = 603: a k chunk of 512 and an odd 91; partial sums over chunks plus the residual.
    ConvCase c{"3x3 k=603 over two chunks, residual, relu", shape(2, 67, 7, 7, 70, 3, 3), true,
               true, relu};
    pad_all(c.s, 1);
    cs.push_back(c);
  }
  {
    // k = 1161: chunks 512, 512 and an odd 137.
    ConvCase c{"3x3 k=1161 over three chunks, bias", shape(1, 129, 5, 5, 20, 3, 3), true};
    pad_all(c.s, 1);
    cs.push_back(c);
  }
  cs.push_back({"1x1 stride 2 (downsample), sigmoid", shape(1, 33, 14, 14, 40, 1, 1), true, false,
                {ConvActivation::kSigmoid}});
  cs.back().s.stride_h = cs.back().s.stride_w = 2;
  {
    ConvCase c{"3x3 14x14 plane, 200 channels, residual", shape(1, 40, 14, 14, 200, 3, 3), true,
               true, relu};
    pad_all(c.s, 1);
    cs.push_back(c);
  }
  return cs;
}

// Restores the conv tile choice however a test exits.
struct ChoiceRestore {
  ~ChoiceRestore() { set_conv_kernel(ConvKernelChoice::kAuto); }
};

// The bf16 paths this CPU runs: the portable loop (forced by kAvx2), the vdpbf16ps tile (asked
// for by kAvx512, when the CPU has AVX512-BF16) and the AMX tile (what kAuto picks when the CPU
// has AMX-BF16). A path the CPU lacks is reported once, not run.
std::vector<std::pair<const char*, ConvKernelChoice>> bf16_paths() {
  std::vector<std::pair<const char*, ConvKernelChoice>> p = {{"portable", ConvKernelChoice::kAvx2}};
  set_conv_kernel(ConvKernelChoice::kAvx512);
  const bool vdp = conv_bf16_native();
  if (vdp) p.push_back({"vdpbf16ps", ConvKernelChoice::kAvx512});
  set_conv_kernel(ConvKernelChoice::kAuto);
  const bool amx = has_amx() && conv_bf16_native();
  if (amx) p.push_back({"amx", ConvKernelChoice::kAuto});
  static bool reported = false;
  if (!reported) {
    reported = true;
    std::printf("bf16 paths: portable, vdpbf16ps %s, amx %s\n",
                vdp ? "run" : "skipped (no AVX512-BF16)",
                amx ? "run" : "skipped (no AMX-BF16 at this level)");
  }
  return p;
}

}  // namespace

TEST_CASE("conv2d_bf16 matches double-precision loops on rounded and on f32 inputs", "[conv]") {
  ChoiceRestore restore;
  Runners runners;
  std::mt19937 rng(11);
  Errors worst;
  for (const ConvCase& cc : conv_cases()) {
    const ConvShape& s = cc.s;
    const int64_t ho = s.out_h(), wo = s.out_w();
    const int64_t k = s.c / s.group * s.kh * s.kw;
    const std::vector<float> x = random_vec(static_cast<size_t>(s.n * s.c * s.h * s.w), rng);
    const std::vector<float> w = random_vec(static_cast<size_t>(s.o * (s.c / s.group) * s.kh * s.kw), rng);
    const std::vector<float> bias = random_vec(static_cast<size_t>(s.o), rng);
    const std::vector<float> res = random_vec(static_cast<size_t>(s.n * s.o * ho * wo), rng);
    const float* bp = cc.bias ? bias.data() : nullptr;
    const float* rp = cc.residual ? res.data() : nullptr;
    const Ref exact = conv_ref(s, rounded(x), rounded(w), bp, rp, cc.ep);
    const Ref f32 = conv_ref(s, x, w, bp, rp, cc.ep);
    const std::vector<uint16_t> w16 = to_bf16(w);
    for (auto [pname, choice] : bf16_paths()) {
      set_conv_kernel(choice);
      for (auto [rname, runner] : runners.all()) {
        INFO(cc.name << ", " << pname << ", runner " << rname);
        std::vector<float> y(exact.y.size(), 12345.0f);
        conv2d_bf16(s, x.data(), w16.data(), bp, rp, cc.ep, y.data(), *runner);
        const Errors e = measure(y, exact, f32, k);
        CHECK(e.worst_exact <= 1.0);
        CHECK(e.worst_f32 <= 1.0);
        CHECK(e.rms_ratio <= 2.0);
        worst.worst_exact = std::max(worst.worst_exact, e.worst_exact);
        worst.worst_f32 = std::max(worst.worst_f32, e.worst_f32);
        worst.rms_ratio = std::max(worst.rms_ratio, e.rms_ratio);
        worst.max_rel = std::max(worst.max_rel, e.max_rel);
      }
    }
  }
  std::printf("conv2d_bf16: worst |err| vs rounded-input ref %.3f of its bound, vs f32 ref %.3f "
              "of its bound; rms err vs f32 %.3f u·rms sqrt(sum (xw)^2); max rel err vs f32 "
              "%.2e\n",
              worst.worst_exact, worst.worst_f32, worst.rms_ratio, worst.max_rel);
}

TEST_CASE("matmul_bf16 matches double-precision loops, odd k and tails", "[conv][matmul]") {
  ChoiceRestore restore;
  Runners runners;
  std::mt19937 rng(5);
  struct Dims {
    int64_t m, k, n;
  };
  for (const Dims& d : {Dims{1, 1, 1}, Dims{37, 129, 75}, Dims{9, 600, 33}, Dims{64, 768, 96},
                        Dims{5, 0, 7}}) {
    const std::vector<float> a = random_vec(static_cast<size_t>(d.m * d.k), rng);
    const std::vector<float> b = random_vec(static_cast<size_t>(d.k * d.n), rng);
    // y = a · b is the 1x1 conv of the image b [k channels, 1 x n] by the filter a.
    ConvShape s = shape(1, d.k, 1, d.n, d.m, 1, 1);
    const Ref exact = d.k ? conv_ref(s, rounded(b), rounded(a), nullptr, nullptr, {})
                          : Ref{std::vector<double>(d.m * d.n), std::vector<double>(d.m * d.n, 1e-3),
                                std::vector<double>(d.m * d.n)};
    const Ref f32 = d.k ? conv_ref(s, b, a, nullptr, nullptr, {}) : exact;
    const std::vector<uint16_t> b16 = to_bf16(b);
    for (auto [pname, choice] : bf16_paths()) {
      set_conv_kernel(choice);
      for (auto [rname, runner] : runners.all()) {
        INFO("m " << d.m << " k " << d.k << " n " << d.n << ", " << pname << ", runner " << rname);
        std::vector<float> y(static_cast<size_t>(d.m * d.n), 12345.0f);
        matmul_bf16(d.m, d.k, d.n, a.data(), b16.data(), y.data(), *runner);
        const Errors e = measure(y, exact, f32, d.k);
        CHECK(e.worst_exact <= 1.0);
        CHECK(e.worst_f32 <= 1.0);
        if (d.k > 0) CHECK(e.rms_ratio <= 2.0);
        // The column epilogue applied by the GEMM's tasks equals bias_activation after it, bit
        // for bit (every block, partial panels and k chunks included).
        for (Activation act : {Activation::kGelu, Activation::kRelu, Activation::kNone}) {
          const std::vector<float> bias = random_vec(static_cast<size_t>(d.n), rng);
          std::vector<float> want = y;
          bias_activation(d.m, d.n, want.data(), d.n, 0.75f, bias.data(), act, *runner);
          std::vector<float> got(y.size(), 12345.0f);
          matmul_bf16(d.m, d.k, d.n, a.data(), b16.data(), got.data(), *runner,
                      {0.75f, bias.data(), act});
          CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        }
        // a in bf16 already, b and y with row strides past n: the same bits in the first n
        // columns, the rest untouched.
        const int64_t ldb = d.n + 5, ldy = d.n + 3;
        const std::vector<uint16_t> a16 = to_bf16(a);
        std::vector<uint16_t> bs(static_cast<size_t>(d.k * ldb), 0x7fc0);  // NaN padding
        for (int64_t r = 0; r < d.k; ++r) {
          std::copy(b16.begin() + r * d.n, b16.begin() + (r + 1) * d.n, bs.begin() + r * ldb);
        }
        std::vector<float> ys(static_cast<size_t>(d.m * ldy), 12345.0f);
        matmul_bf16_a16(d.m, d.k, d.n, a16.data(), d.k, bs.data(), ldb, ys.data(), ldy, *runner);
        for (int64_t i = 0; i < d.m; ++i) {
          CHECK(std::memcmp(ys.data() + i * ldy, y.data() + i * d.n, d.n * sizeof(float)) == 0);
          for (int64_t c = d.n; c < ldy; ++c) CHECK(ys[static_cast<size_t>(i * ldy + c)] == 12345.0f);
        }
      }
    }
  }
}

TEST_CASE("convert_precision_bf16 runs only when asked and the ops follow it", "[passes][conv]") {
  using namespace sampan::graph;
  std::mt19937 rng(3);
  auto constant = [&](Graph& g, const std::string& name, const Shape& shape) {
    return g.add_constant(name, Tensor::from_f32(shape, random_vec(static_cast<size_t>(shape_numel(shape)), rng)));
  };
  // conv (3x3) -> depthwise conv -> global flatten as matmul [n, 8*5*5] · [200, 10]; and a
  // matmul by a trans_b weight, which must stay f32.
  auto build = [&](Graph& g) {
    const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(2), Dim::fixed(3), Dim::fixed(7), Dim::fixed(7)});
    const ValueId c1 = g.add("conv2d", "conv", {x, constant(g, "w1", {8, 3, 3, 3}), constant(g, "b1", {8})},
                             {{"activation", std::string("relu")}});
    const ValueId c2 = g.add("conv2d", "dw", {c1, constant(g, "w2", {8, 1, 3, 3})},
                             {{"group", int64_t{8}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    const ValueId flat = g.add("flatten", "flat", {c2});
    const ValueId m1 = g.add("matmul", "fc", {flat, constant(g, "w3", {200, 10}), constant(g, "b3", {10})});
    g.mark_output(g.add("matmul", "fc_t", {m1, constant(g, "w4", {6, 10})}, {{"trans_b", int64_t{1}}}));
  };
  std::vector<float> xs = random_vec(2 * 3 * 7 * 7, rng);
  const Tensor x = Tensor::from_f32({2, 3, 7, 7}, xs);
  auto run = [&](const Graph& g) {
    ThreadPool pool(2);
    Executor ex(g, pool);
    const Tensor y = ex.run({{"x", x}})[0].contiguous();
    return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
  };
  Graph f32_graph, bf16_graph;
  const std::mt19937 start = rng;
  build(f32_graph);
  rng = start;  // the same weights
  build(bf16_graph);
  const passes::PassReport plain = passes::optimize(f32_graph);
  CHECK(plain.rewrites("convert_precision_bf16") == 0);
  for (const passes::PassStats& p : plain.passes) CHECK(p.name != "convert_precision_bf16");
  const passes::PassReport report = passes::optimize(bf16_graph, {.bf16 = true});
  CHECK(report.rewrites("convert_precision_bf16") == 2);  // the 3x3 conv and fc
  for (const Node& n : bf16_graph.nodes()) {
    if (n.dead) continue;
    const bool want = n.name == "conv" || n.name == "fc";
    INFO(n.name);
    CHECK((n.attrs.get_string("precision", "f32") == "bf16") == want);
    if (want) CHECK(bf16_graph.value(n.inputs[1]).constant.dtype() == DType::kBF16);
  }
  const std::vector<float> want = run(f32_graph);
  const std::vector<float> got = run(bf16_graph);
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * double{got[i] - want[i]};
    den += double{want[i]} * want[i];
  }
  // Two bf16 GEMMs in a row (k = 27 and 200): a relative rms error of a few u, far from 0.
  CHECK(std::sqrt(num / den) < 8 * kU);
  CHECK(num > 0);
}
