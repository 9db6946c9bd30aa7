// The blocked-layout conv, pooling and reorders (kernels/cpu/conv_nchwc_cpu.h) against
// double-precision references written here, on every register tile this CPU has, and the
// choose_conv_layout pass (engine/graph/passes/layout_passes.h) on small graphs: the region it
// finds, the reorders it inserts, and outputs equal to the graph it was given.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/layout_passes.h"
#include "engine/graph/passes/passes.h"
#include "engine/graph/passes/precision_passes.h"
#include "engine/ops/conv2d_nchwc.h"
#include "kernels/common/half.h"
#include "kernels/cpu/conv_nchwc_cpu.h"

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

// [n, ceil(c / b), hw, b] -> [n, c, hw].
std::vector<float> from_blocked(const std::vector<float>& y, int64_t n, int64_t c, int64_t hw,
                                int64_t b) {
  const int64_t cb = ceil_div(c, b);
  std::vector<float> x(static_cast<size_t>(n * c * hw));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < hw; ++p) {
        x[static_cast<size_t>((i * c + ch) * hw + p)] =
            y[static_cast<size_t>(((i * cb + ch / b) * hw + p) * b + ch % b)];
      }
    }
  }
  return x;
}

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
  bool plain_input;  // the stem form: x stays NCHW
};

int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t lo, int64_t hi, int64_t d) {
  return (in + lo + hi - d * (k - 1) - 1) / s + 1;
}

double activate(double v, const ConvEpilogue& ep) {
  switch (ep.act) {
    case ConvActivation::kNone: return v;
    case ConvActivation::kRelu: return v > 0 ? v : 0;
    case ConvActivation::kClip: return std::min(std::max(v, double{ep.act_min}), double{ep.act_max});
    case ConvActivation::kSigmoid: return 1.0 / (1.0 + std::exp(-v));
    case ConvActivation::kHardSwish: return v * std::min(std::max(v / 6.0 + 0.5, 0.0), 1.0);
  }
  return v;
}

// v rounded to bf16 (nearest even) and back.
std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));
  return v;
}

// Runs one case through conv2d_nchwc at `block` (bf16: conv2d_nchwc_bf16, block 16, blocked
// input) and checks every real output channel against a direct convolution in double (bf16: of
// the operands rounded to bf16, whose products the tile sums exactly). Tolerance: f32 rounding
// of a sum of k products is below ~k * 2^-24 * sum |x||w|; 1e-5 relative to that magnitude
// leaves room for k up to ~160 with margin and still catches any misplaced tap (or a missed
// rounding: bf16 rounds by up to 2^-9 relative).
void check_conv(const ConvCase& k, const ConvEpilogue& ep, bool with_bias, bool with_res,
                int64_t block, TaskRunner& runner, std::mt19937& rng, bool bf16 = false) {
  const int64_t ho = out_dim(k.h, k.kh, k.sh, k.pt, k.pb, k.dh);
  const int64_t wo = out_dim(k.w, k.kw, k.sw, k.pl, k.pr, k.dw);
  const std::vector<float> x_in = random_vec(k.n * k.c * k.h * k.w, rng);
  const std::vector<float> w_in = random_vec(k.o * k.c * k.kh * k.kw, rng);
  // What the reference multiplies: the bf16 tile's operands are rounded (x by the kernel).
  const std::vector<float> x = bf16 ? bf16_rounded(x_in) : x_in;
  const std::vector<float> w = bf16 ? bf16_rounded(w_in) : w_in;
  const std::vector<float> bias = random_vec(k.o, rng);
  const std::vector<float> res = random_vec(k.n * k.o * ho * wo, rng);
  const int64_t ob = ceil_div(k.o, block);
  const int64_t b_in = k.plain_input ? 1 : block;
  const int64_t cb = k.plain_input ? k.c : ceil_div(k.c, block);
  // Weights in the kernel's order [ob, cb, kh, kw, b_in, block].
  std::vector<float> wb(static_cast<size_t>(ob * cb * k.kh * k.kw * b_in * block), 0.0f);
  for (int64_t oc = 0; oc < k.o; ++oc) {
    for (int64_t ic = 0; ic < k.c; ++ic) {
      for (int64_t t = 0; t < k.kh * k.kw; ++t) {
        wb[static_cast<size_t>(
            ((((oc / block) * cb + ic / b_in) * k.kh * k.kw + t) * b_in + ic % b_in) * block +
            oc % block)] = w[static_cast<size_t>((oc * k.c + ic) * k.kh * k.kw + t)];
      }
    }
  }
  // The bf16 form: the same elements in channel pairs [ob, cb, kh, kw, block / 2, block, 2];
  // for plain input in kernel-column pairs [ob, c, kh, kw2 / 2, 1, block, 2], kw2 = kw rounded up
  // to even with a zero column, which one more column of right padding makes the same conv.
  std::vector<uint16_t> wb16;
  const int64_t kw2 = (k.kw + 1) / 2 * 2;
  if (bf16 && k.plain_input) {
    wb16.assign(static_cast<size_t>(ob * k.c * k.kh * kw2 * block), 0);
    for (int64_t oc = 0; oc < k.o; ++oc) {
      for (int64_t ic = 0; ic < k.c; ++ic) {
        for (int64_t ky = 0; ky < k.kh; ++ky) {
          for (int64_t kx = 0; kx < k.kw; ++kx) {
            wb16[static_cast<size_t>(
                (((((oc / block) * k.c + ic) * k.kh + ky) * (kw2 / 2) + kx / 2) * block +
                 oc % block) * 2 + kx % 2)] =
                f32_to_bf16(w[static_cast<size_t>(((oc * k.c + ic) * k.kh + ky) * k.kw + kx)]);
          }
        }
      }
    }
  } else if (bf16) {
    wb16.resize(wb.size());
    const int64_t taps = ob * cb * k.kh * k.kw;
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t i = 0; i < block; ++i) {
        for (int64_t o = 0; o < block; ++o) {
          wb16[static_cast<size_t>(((t * block / 2 + i / 2) * block + o) * 2 + i % 2)] =
              f32_to_bf16(wb[static_cast<size_t>((t * block + i) * block + o)]);
        }
      }
    }
  }
  std::vector<float> bias_b(static_cast<size_t>(ob * block), 0.0f);
  std::copy(bias.begin(), bias.end(), bias_b.begin());
  // The kernel gets the unrounded input.
  const std::vector<float> xb =
      k.plain_input ? x_in : to_blocked(x_in, k.n, k.c, k.h * k.w, block);
  const std::vector<float> rb = to_blocked(res, k.n, k.o, ho * wo, block);
  std::vector<float> yb(static_cast<size_t>(k.n * ob * ho * wo * block), NAN);

  NchwcConvShape s;
  s.n = k.n;
  s.in_blocks = cb;
  s.b_in = b_in;
  s.h = k.h;
  s.w = k.w;
  s.out_blocks = ob;
  s.block = block;
  s.kh = k.kh;
  s.kw = k.kw;
  s.stride_h = k.sh;
  s.stride_w = k.sw;
  s.pad_t = k.pt;
  s.pad_l = k.pl;
  s.pad_b = k.pb;
  s.pad_r = k.pr;
  s.dil_h = k.dh;
  s.dil_w = k.dw;
  if (bf16 && k.plain_input) {
    s.kw = kw2;
    s.pad_r += kw2 - k.kw;
  }
  REQUIRE(s.out_h() == ho);
  REQUIRE(s.out_w() == wo);
  if (bf16) {
    conv2d_nchwc_bf16(s, xb.data(), wb16.data(), with_bias ? bias_b.data() : nullptr,
                      with_res ? rb.data() : nullptr, ep, yb.data(), runner);
  } else {
    conv2d_nchwc(s, xb.data(), wb.data(), with_bias ? bias_b.data() : nullptr,
                 with_res ? rb.data() : nullptr, ep, yb.data(), runner);
  }
  const std::vector<float> y = from_blocked(yb, k.n, k.o, ho * wo, block);

  int bad = 0;
  for (int64_t i = 0; i < k.n; ++i) {
    for (int64_t oc = 0; oc < k.o; ++oc) {
      for (int64_t oy = 0; oy < ho; ++oy) {
        for (int64_t ox = 0; ox < wo; ++ox) {
          double acc = with_bias ? bias[static_cast<size_t>(oc)] : 0.0;
          double mag = std::abs(acc);
          for (int64_t ic = 0; ic < k.c; ++ic) {
            for (int64_t ky = 0; ky < k.kh; ++ky) {
              const int64_t iy = oy * k.sh - k.pt + ky * k.dh;
              if (iy < 0 || iy >= k.h) continue;
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                const int64_t ix = ox * k.sw - k.pl + kx * k.dw;
                if (ix < 0 || ix >= k.w) continue;
                const double p = double{x[static_cast<size_t>(((i * k.c + ic) * k.h + iy) * k.w + ix)]} *
                                 w[static_cast<size_t>(((oc * k.c + ic) * k.kh + ky) * k.kw + kx)];
                acc += p;
                mag += std::abs(p);
              }
            }
          }
          const size_t yi = static_cast<size_t>(((i * k.o + oc) * ho + oy) * wo + ox);
          if (with_res) {
            acc += res[yi];
            mag += std::abs(res[yi]);
          }
          const double want = activate(acc, ep);
          if (!(std::abs(y[yi] - want) <= 1e-5 * (1.0 + mag)) && ++bad <= 3) {
            FAIL_CHECK("n " << i << " o " << oc << " y " << oy << " x " << ox << ": got " << y[yi]
                            << ", want " << want);
          }
        }
      }
    }
  }
  CHECK(bad == 0);
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      // n, c, h, w, o, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, plain
      {1, 32, 9, 10, 48, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, false},    // pointwise, 90-pixel run
      {2, 16, 7, 7, 16, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, false},     // 1x1 stride 2, batch 2
      {1, 32, 13, 11, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false},   // 3x3 stride 2 with pads
      {2, 16, 9, 17, 24, 3, 3, 1, 1, 0, 1, 2, 1, 1, 1, false},    // asymmetric pads, o % 16
      {1, 24, 11, 12, 40, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, false},   // dilation 2, c and o padded
      {1, 3, 23, 19, 20, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, true},     // the 7x7 stem on RGB
      {2, 3, 8, 30, 64, 3, 3, 1, 2, 1, 0, 1, 0, 1, 1, true},      // plain input, stride (1, 2)
      {1, 40, 5, 33, 8, 1, 3, 1, 1, 0, 1, 0, 1, 1, 3, false},     // 1x3, dilated along w
      // Pointwise with more input channels than one 64-channel chunk (partial sums in y): 200
      // channels are 4 chunks at block 8 (the last 1 block, padded) and 4 at block 16.
      {2, 200, 7, 9, 40, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, false},
      {1, 136, 3, 35, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, false},
      // More than the bf16 tile's 256-channel chunk: 2 chunks there (16 blocks + 3, padded).
      {1, 300, 4, 9, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, false},
      // A plane of several pointwise runs (272 pixels: 3 runs of 98 on the f32 tile, 2 of 140
      // on the bf16 one, the last shorter).
      {2, 32, 17, 16, 40, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, false},
  };
  return cases;
}

std::vector<ConvEpilogue> epilogues() {
  std::vector<ConvEpilogue> eps(5);
  eps[1].act = ConvActivation::kRelu;
  eps[2].act = ConvActivation::kClip;
  eps[2].act_min = -0.5f;
  eps[2].act_max = 0.7f;
  eps[3].act = ConvActivation::kSigmoid;
  eps[4].act = ConvActivation::kHardSwish;
  return eps;
}

struct KernelRestore {
  ~KernelRestore() { set_nchwc_kernel(ConvKernelChoice::kAuto); }
};

// The tile choices to run at `block`: block 8 is AVX2 only; block 16 on both tiles.
std::vector<ConvKernelChoice> tiles_for(int64_t block) {
  std::vector<ConvKernelChoice> out = {ConvKernelChoice::kAvx2};
  if (block == 16 && nchwc_kernel_available(ConvKernelChoice::kAvx512)) {
    out.push_back(ConvKernelChoice::kAvx512);
  }
  return out;
}

}  // namespace

TEST_CASE("conv2d_nchwc matches a double direct convolution on every tile", "[conv_nchwc]") {
  KernelRestore restore;
  ThreadPool pool(2);
  SerialRunner serial;
  std::mt19937 rng(7);
  for (int64_t block : {int64_t{8}, int64_t{16}}) {
    for (ConvKernelChoice tile : tiles_for(block)) {
      set_nchwc_kernel(tile);
      for (size_t ci = 0; ci < conv_cases().size(); ++ci) {
        const std::vector<ConvEpilogue> eps = epilogues();
        for (size_t ei = 0; ei < eps.size(); ++ei) {
          const bool bias = ei % 2 == 0;
          const bool res = ei % 3 != 1;
          INFO("block " << block << " tile " << static_cast<int>(tile) << " case " << ci
                        << " epilogue " << ei);
          TaskRunner& runner = ei % 2 ? static_cast<TaskRunner&>(pool) : serial;
          check_conv(conv_cases()[ci], eps[ei], bias, res, block, runner, rng);
        }
      }
    }
  }
  // The bf16 tile (conv2d_nchwc_bf16: block 16; plain input in kernel-column pairs) against the
  // double convolution of the bf16-rounded operands, where the CPU has AVX512-BF16 (else
  // reported, not run).
  if (!nchwc_bf16_runs(/*force=*/true)) {
    std::printf("conv2d_nchwc_bf16: skipped (no AVX512-BF16 at this level)\n");
    return;
  }
  int checked = 0;
  for (size_t ci = 0; ci < conv_cases().size(); ++ci) {
    const std::vector<ConvEpilogue> eps = epilogues();
    for (size_t ei = 0; ei < eps.size(); ++ei) {
      const bool bias = ei % 2 == 0;
      const bool res = ei % 3 != 1;
      INFO("bf16 tile, case " << ci << " epilogue " << ei);
      TaskRunner& runner = ei % 2 ? static_cast<TaskRunner&>(pool) : serial;
      check_conv(conv_cases()[ci], eps[ei], bias, res, 16, runner, rng, /*bf16=*/true);
      ++checked;
    }
  }
  CHECK(checked == 60);
}

TEST_CASE("reorder_to_nchwc pads with zeros and reorder_to_nchw inverts it", "[conv_nchwc]") {
  ThreadPool pool(2);
  std::mt19937 rng(1);
  for (int64_t block : {int64_t{8}, int64_t{16}}) {
    const int64_t n = 2, c = 20, hw = 77;
    const std::vector<float> x = random_vec(n * c * hw, rng);
    std::vector<float> yb(static_cast<size_t>(n * ceil_div(c, block) * hw * block), NAN);
    reorder_to_nchwc(n, c, hw, block, x.data(), yb.data(), pool);
    CHECK(yb == to_blocked(x, n, c, hw, block));
    std::vector<float> back(x.size(), NAN);
    reorder_to_nchw(n, c, hw, block, yb.data(), back.data(), pool);
    CHECK(back == x);
  }
}

namespace {

// Pooling in double over the real channels (pool2d's semantics, pool_cpu.h).
void check_pool(const PoolShape& s0, int64_t c, int64_t block, TaskRunner& runner,
                std::mt19937& rng) {
  PoolShape s = s0;
  s.c = ceil_div(c, block) * block;
  const std::vector<float> x = random_vec(s.n * c * s.h * s.w, rng, -3.0f, 3.0f);
  const std::vector<float> xb = to_blocked(x, s.n, c, s.h * s.w, block);
  std::vector<float> yb(static_cast<size_t>(s.n * s.c * s.ho * s.wo), NAN);
  pool2d_nchwc(s, block, xb.data(), yb.data(), runner);
  const std::vector<float> y = from_blocked(yb, s.n, c, s.ho * s.wo, block);
  int bad = 0;
  for (int64_t p = 0; p < s.n * c; ++p) {
    for (int64_t oy = 0; oy < s.ho; ++oy) {
      for (int64_t ox = 0; ox < s.wo; ++ox) {
        double acc = s.kind == PoolKind::kMax ? -INFINITY : 0.0;
        int64_t inside = 0, padded = 0;
        for (int64_t ky = 0; ky < s.kh; ++ky) {
          for (int64_t kx = 0; kx < s.kw; ++kx) {
            const int64_t iy = oy * s.stride_h - s.pad_t + ky * s.dil_h;
            const int64_t ix = ox * s.stride_w - s.pad_l + kx * s.dil_w;
            if (iy >= -s.pad_t && iy < s.h + s.pad_b && ix >= -s.pad_l && ix < s.w + s.pad_r) {
              ++padded;
            }
            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
            ++inside;
            const double v = x[static_cast<size_t>((p * s.h + iy) * s.w + ix)];
            acc = s.kind == PoolKind::kMax ? std::max(acc, v) : acc + v;
          }
        }
        if (s.kind == PoolKind::kAvg) {
          const int64_t count = s.count_include_pad ? padded : inside;
          acc = count > 0 ? acc / static_cast<double>(count) : 0.0;
        }
        const float got = y[static_cast<size_t>((p * s.ho + oy) * s.wo + ox)];
        if (!(std::abs(got - acc) <= 1e-5 * (1.0 + std::abs(acc))) && ++bad <= 3) {
          FAIL_CHECK("plane " << p << " y " << oy << " x " << ox << ": got " << got
                              << ", want " << acc);
        }
      }
    }
  }
  CHECK(bad == 0);
}

PoolShape pool_shape(PoolKind kind, int64_t n, int64_t h, int64_t w, int64_t k, int64_t stride,
                     int64_t pad, int64_t dil, int64_t ho, int64_t wo) {
  PoolShape s;
  s.kind = kind;
  s.n = n;
  s.h = h;
  s.w = w;
  s.kh = s.kw = k;
  s.stride_h = s.stride_w = stride;
  s.pad_t = s.pad_l = s.pad_b = s.pad_r = pad;
  s.dil_h = s.dil_w = dil;
  s.ho = ho;
  s.wo = wo;
  return s;
}

}  // namespace

TEST_CASE("pool2d_nchwc matches a double reference", "[conv_nchwc][pool]") {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  for (int64_t block : {int64_t{8}, int64_t{16}}) {
    INFO("block " << block);
    // ResNet's 3x3 stride-2 max pool with pad 1.
    check_pool(pool_shape(PoolKind::kMax, 2, 13, 12, 3, 2, 1, 1, 7, 6), 24, block, pool, rng);
    // Dilated max pool.
    check_pool(pool_shape(PoolKind::kMax, 1, 11, 11, 3, 1, 2, 2, 11, 11), 16, block, pool, rng);
    // Average with and without the pads counted; a ceil_mode-sized last window.
    PoolShape avg = pool_shape(PoolKind::kAvg, 1, 10, 9, 3, 2, 1, 1, 5, 5);
    check_pool(avg, 20, block, pool, rng);
    avg.count_include_pad = true;
    check_pool(avg, 20, block, pool, rng);
    check_pool(pool_shape(PoolKind::kAvg, 1, 8, 8, 3, 3, 0, 1, 3, 3), 8, block, pool, rng);
    // Global average and max.
    check_pool(pool_shape(PoolKind::kAvg, 2, 7, 7, 7, 1, 0, 1, 1, 1), 40, block, pool, rng);
    PoolShape gmax = pool_shape(PoolKind::kMax, 1, 5, 6, 1, 1, 0, 1, 1, 1);
    gmax.kh = 5;
    gmax.kw = 6;
    check_pool(gmax, 16, block, pool, rng);
  }
}

TEST_CASE("pool2d_nchwc max and average equal the NCHW pool bit for bit, NaNs and signed zeros too",
          "[conv_nchwc][pool]") {
  // The blocked pool runs vector max / add; the NCHW pool (pool_cpu) scalar std::max(acc, x),
  // which skips a NaN x and keeps the first of two equal zeros. Both must give the same bits.
  ThreadPool pool(2);
  std::mt19937 rng(9);
  for (int64_t block : {int64_t{8}, int64_t{16}}) {
    for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
      INFO("block " << block << (kind == PoolKind::kMax ? " max" : " avg"));
      const int64_t c = 20;
      PoolShape s = pool_shape(kind, 2, 9, 10, 3, 2, 1, 1, 5, 5);
      s.c = c;
      std::vector<float> x = random_vec(s.n * c * s.h * s.w, rng, -1.0f, 1.0f);
      for (size_t i = 0; i < x.size(); i += 7) x[i] = (i / 7) % 3 == 0 ? NAN : ((i / 7) % 3 == 1 ? 0.0f : -0.0f);
      std::vector<float> want(static_cast<size_t>(s.n * c * s.ho * s.wo));
      pool2d(s, x.data(), want.data(), pool);
      PoolShape sb = s;
      sb.c = ceil_div(c, block) * block;
      std::vector<float> yb(static_cast<size_t>(s.n * sb.c * s.ho * s.wo), 1.0f);
      pool2d_nchwc(sb, block, to_blocked(x, s.n, c, s.h * s.w, block).data(), yb.data(), pool);
      const std::vector<float> got = from_blocked(yb, s.n, c, s.ho * s.wo, block);
      int bad = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0 && !(std::isnan(want[i]) && std::isnan(got[i]))) {
          if (bad++ < 5) FAIL_CHECK("output " << i << ": nchw " << want[i] << ", nchwc " << got[i]);
        }
      }
      CHECK(bad == 0);
    }
  }
}

namespace {

using namespace sampan::graph;

ValueId constant(Graph& g, const std::string& name, const Shape& shape, std::mt19937& rng) {
  return g.add_constant(name, Tensor::from_f32(shape, random_vec(shape_numel(shape), rng, -0.3f, 0.3f)));
}

ValueId conv(Graph& g, const std::string& name, ValueId x, int64_t c, int64_t o, int64_t k,
             int64_t stride, int64_t pad, const std::string& act, std::mt19937& rng,
             ValueId residual = kNoValue, int64_t group = 1) {
  std::vector<ValueId> in = {x, constant(g, name + ".w", {o, c / group, k, k}, rng),
                             constant(g, name + ".b", {o}, rng)};
  if (residual != kNoValue) in.push_back(residual);
  return g.add("conv2d", name, in,
               {{"strides", std::vector<int64_t>{stride, stride}},
                {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                {"group", group},
                {"activation", act}});
}

// A small ResNet-like graph: stem, max pool, a residual block, a depthwise conv (stays NCHW),
// global average pool; three outputs, one of them inside the region.
Graph small_cnn(std::mt19937& rng) {
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("batch"), Dim::fixed(3), Dim::fixed(20), Dim::fixed(18)});
  const ValueId stem = conv(g, "stem", x, 3, 16, 7, 2, 3, "relu", rng);
  const ValueId p = g.add("pool2d", "maxpool", {stem},
                          {{"kind", std::string("max")},
                           {"kernel", std::vector<int64_t>{3, 3}},
                           {"strides", std::vector<int64_t>{2, 2}},
                           {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  const ValueId a = conv(g, "block.a", p, 16, 32, 1, 1, 0, "relu", rng);
  const ValueId b = conv(g, "block.b", a, 32, 32, 3, 1, 1, "hard_swish", rng);
  const ValueId c = conv(g, "block.c", b, 32, 16, 1, 1, 0, "relu", rng, p);
  const ValueId dw = conv(g, "dw", c, 16, 16, 3, 1, 1, "none", rng, kNoValue, 16);
  const ValueId gap = g.add("pool2d", "gap", {c}, {{"kind", std::string("avg")}, {"global", int64_t{1}}});
  g.mark_output(gap);
  g.mark_output(b);
  g.mark_output(dw);
  return g;
}

std::vector<std::vector<float>> run_graph(const Graph& g, const Tensor& x) {
  ThreadPool pool(2);
  Executor ex(g, pool);
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ex.run({{"x", x}})) {
    const Tensor c = t.contiguous();
    out.emplace_back(c.data<float>(), c.data<float>() + c.numel());
  }
  return out;
}

}  // namespace

TEST_CASE("choose_conv_layout blocks the conv region and keeps the outputs", "[conv_nchwc][passes]") {
  KernelRestore restore;
  std::mt19937 rng(11);
  Graph g = small_cnn(rng);
  const Tensor x = Tensor::from_f32({2, 3, 20, 18}, random_vec(2 * 3 * 20 * 18, rng));
  const std::vector<std::vector<float>> before = run_graph(g, x);
  const std::vector<std::string> names = {g.value(g.outputs()[0]).name, g.value(g.outputs()[1]).name,
                                          g.value(g.outputs()[2]).name};
  const passes::PassReport report = passes::run_passes(g, {{"choose_conv_layout", passes::choose_conv_layout}});
  // Four convs and two pools rewritten (the 3x3 stride-1 one may go to conv2d_winograd:
  // test_conv_winograd.cc); the depthwise conv stays NCHW.
  CHECK(report.rewrites("choose_conv_layout") == 6);
  passes::OpHistogram ops = passes::op_histogram(g);
  CHECK(ops["conv2d_nchwc"] + ops["conv2d_winograd"] == 4);
  CHECK(ops["pool2d_nchwc"] == 2);
  CHECK(ops["conv2d"] == 1);
  // The stem reads the plain input: nothing enters the region through a reorder. Three values
  // leave it: the block's output for the depthwise conv, b and the pooled output.
  CHECK(ops["reorder_nchwc"] == 0);
  CHECK(ops["reorder_nchw"] == 3);
  for (size_t i = 0; i < names.size(); ++i) CHECK(g.value(g.outputs()[i]).name == names[i]);
  std::vector<ConvKernelChoice> tiles = tiles_for(ops::nchwc_block());
  for (ConvKernelChoice tile : tiles) {
    set_nchwc_kernel(tile);
    const std::vector<std::vector<float>> after = run_graph(g, x);
    REQUIRE(after.size() == before.size());
    for (size_t o = 0; o < after.size(); ++o) {
      REQUIRE(after[o].size() == before[o].size());
      for (size_t i = 0; i < after[o].size(); ++i) {
        INFO("output " << o << " element " << i << " tile " << static_cast<int>(tile));
        CHECK(std::abs(after[o][i] - before[o][i]) <= 1e-5 * (1.0 + std::abs(before[o][i])));
      }
    }
  }
}

TEST_CASE("choose_conv_layout reorders a wide input, leaves isolated convs alone, blocks bf16 convs where their tile is fast",
          "[conv_nchwc][passes]") {
  std::mt19937 rng(2);
  {
    // Two chained convs on a 32-channel input: the input is reordered once.
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(1), Dim::fixed(32), Dim::fixed(6), Dim::fixed(6)});
    const ValueId a = conv(g, "a", x, 32, 32, 3, 1, 1, "relu", rng);
    g.mark_output(conv(g, "b", a, 32, 16, 1, 1, 0, "none", rng, kNoValue));
    const Tensor tx = Tensor::from_f32({1, 32, 6, 6}, random_vec(32 * 36, rng));
    const std::vector<std::vector<float>> before = run_graph(g, tx);
    CHECK(passes::choose_conv_layout(g) == 2);
    g.compact();
    passes::OpHistogram ops = passes::op_histogram(g);
    CHECK(ops["reorder_nchwc"] == 1);
    CHECK(ops["reorder_nchw"] == 1);
    CHECK(ops["conv2d_nchwc"] + ops["conv2d_winograd"] == 2);
    const std::vector<std::vector<float>> after = run_graph(g, tx);
    for (size_t i = 0; i < after[0].size(); ++i) {
      CHECK(std::abs(after[0][i] - before[0][i]) <= 1e-5 * (1.0 + std::abs(before[0][i])));
    }
  }
  {
    // An isolated wide conv (reorders on both sides) stays conv2d, and so does a conv marked
    // bf16 whose weight is not a bf16 constant (convert_precision_bf16 makes it one).
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(1), Dim::fixed(32), Dim::fixed(6), Dim::fixed(6)});
    const ValueId a = conv(g, "a", x, 32, 32, 3, 1, 1, "relu", rng);
    g.mark_output(g.add("unary", "neg", {a}, {{"kind", std::string("neg")}}));
    const ValueId s = g.add_input("s", DType::kF32, {Dim::fixed(1), Dim::fixed(3), Dim::fixed(8), Dim::fixed(8)});
    const ValueId stem = conv(g, "stem", s, 3, 16, 3, 1, 1, "relu", rng);
    g.mutable_node(g.value(stem).producer).attrs.set("precision", std::string("bf16"));
    g.mark_output(stem);
    CHECK(passes::choose_conv_layout(g) == 0);
  }
  {
    // bf16 convs (convert_precision_bf16 first): blocked on the bf16 tile where it is the fast
    // one (the 7x7 stem in kernel-column pairs, padded to 7x8), elsewhere left alone. Against the
    // NCHW bf16 graph the products are the same and only their order differs (measured: 3e-7 of
    // the magnitude), but a later input a last bit apart may round to another bf16 (2^-8 of
    // that one term): 1e-3 of the magnitude, where a misplaced tap or pair is off by O(1).
    Graph g = small_cnn(rng);
    REQUIRE(passes::convert_precision_bf16(g) == 4);  // the depthwise conv stays f32
    g.compact();
    const Tensor tx = Tensor::from_f32({2, 3, 20, 18}, random_vec(2 * 3 * 20 * 18, rng));
    const std::vector<std::vector<float>> before = run_graph(g, tx);
    const int rewrites = passes::choose_conv_layout(g);
    g.compact();
    passes::OpHistogram ops = passes::op_histogram(g);
    if (!ops::nchwc_bf16_runs()) {
      std::printf("choose_conv_layout bf16: convs left NCHW (the bf16 tile is not the fast one "
                  "here)\n");
      CHECK(rewrites == 0);  // no conv joins, so no pool has a blocked input
    } else {
      CHECK(rewrites == 6);
      CHECK(ops["conv2d_nchwc"] == 4);
      CHECK(ops["conv2d_winograd"] == 0);
      int bf16_weights = 0;
      for (const Node& n : g.nodes()) {
        if (!n.dead && n.op == "conv2d_nchwc" &&
            g.value(n.inputs[1]).constant.dtype() == DType::kBF16) {
          ++bf16_weights;
        }
      }
      CHECK(bf16_weights == 4);  // the stem's in kernel-column pairs
      const std::vector<std::vector<float>> after = run_graph(g, tx);
      REQUIRE(after.size() == before.size());
      for (size_t o = 0; o < after.size(); ++o) {
        REQUIRE(after[o].size() == before[o].size());
        for (size_t i = 0; i < after[o].size(); ++i) {
          INFO("output " << o << " element " << i);
          CHECK(std::abs(after[o][i] - before[o][i]) <= 1e-3 * (1.0 + std::abs(before[o][i])));
        }
      }
    }
  }
  {
    // SAMPAN_CONV_LAYOUT=nchw turns the pass off.
    Graph g = small_cnn(rng);
    ::setenv("SAMPAN_CONV_LAYOUT", "nchw", 1);
    const int n = passes::choose_conv_layout(g);
    ::unsetenv("SAMPAN_CONV_LAYOUT");
    CHECK(n == 0);
  }
}
