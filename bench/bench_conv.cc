// conv2d throughput on ResNet50's layer shapes (batch 1 and 8), f32, printed as GFLOP/s
// (2 * N * O * Ho * Wo * C/g * kh * kw per call), then the blocked 3x3 stride-1 layers on the
// direct tile (conv2d_nchwc) against Winograd F(4x4, 3x3) (conv2d_winograd), both counted at the
// direct conv's FLOPs (so Winograd's figure is an effective rate), timed in interleaved rounds
// on a noisy machine. Usage: bench_conv [threads] [isa] [winograd | bf16 | nchwc].
// threads: 0 (default) = one per core; isa: avx2 | avx512 to force a kernel; winograd: only
// the direct-vs-Winograd table; bf16: only the bf16 table instead (conv2d_bf16 on ResNet-50's
// layers and matmul_bf16 on BERT-base's, the vdpbf16ps tile against the AMX tile in
// interleaved rounds, on a CPU with AVX512-BF16; the AMX column needs AMX-BF16); nchwc: only
// every ResNet-50 layer shape on the blocked direct tile (conv2d_nchwc, what a model runs for
// its 1x1 and strided convs; the stem from plain NCHW input), batch 1 and 8, next to the bf16
// tile (conv2d_nchwc_bf16, blocked input only) where the CPU has AVX512-BF16.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/common/half.h"
#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/conv_nchwc_cpu.h"
#include "kernels/cpu/conv_winograd_cpu.h"
#include "kernels/cpu/isa.h"

using namespace sampan;
using namespace sampan::cpu;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Layer {
  const char* name;
  int64_t c, hw, o, k, stride, pad;
};

// ResNet-50's conv shapes (the f32 and bf16 tables).
const Layer kResnetLayers[] = {
    {"stem 7x7 s2 3->64 @224", 3, 224, 64, 7, 2, 3},
    {"3x3 64->64 @56", 64, 56, 64, 3, 1, 1},
    {"1x1 256->64 @56", 256, 56, 64, 1, 1, 0},
    {"1x1 64->256 @56", 64, 56, 256, 1, 1, 0},
    {"3x3 s2 128->128 @56", 128, 56, 128, 3, 2, 1},
    {"3x3 128->128 @28", 128, 28, 128, 3, 1, 1},
    {"1x1 512->128 @28", 512, 28, 128, 1, 1, 0},
    {"3x3 256->256 @14", 256, 14, 256, 3, 1, 1},
    {"1x1 1024->256 @14", 1024, 14, 256, 1, 1, 0},
    {"3x3 512->512 @7", 512, 7, 512, 3, 1, 1},
    {"1x1 512->2048 @7", 512, 7, 2048, 1, 1, 0},
};

ConvShape layer_shape(const Layer& l, int64_t batch) {
  ConvShape s;
  s.n = batch, s.c = l.c, s.h = s.w = l.hw, s.o = l.o, s.kh = s.kw = l.k;
  s.stride_h = s.stride_w = l.stride;
  s.pad_t = s.pad_l = s.pad_b = s.pad_r = l.pad;
  return s;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Seconds per call of f: the best of 3 rounds of `iters` calls.
template <class F>
double best_time(int iters, F&& f) {
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now();
    for (int i = 0; i < iters; ++i) f();
    best = std::min(best, (now() - t0) / iters);
  }
  return best;
}

// The 3x3 stride-1 convs of ResNet-50, blocked, direct tile vs Winograd: 4 interleaved pairs
// of rounds, best of each.
void bench_winograd(ThreadPool& pool) {
  const int64_t bl = nchwc_preferred_block();
  if (!winograd_available(bl)) {
    std::printf("winograd: no kernel for block %ld here\n", static_cast<long>(bl));
    return;
  }
  const Layer layers[] = {
      {"3x3 64->64 @56", 64, 56, 64, 3, 1, 1},
      {"3x3 128->128 @28", 128, 28, 128, 3, 1, 1},
      {"3x3 256->256 @14", 256, 14, 256, 3, 1, 1},
      {"3x3 512->512 @7", 512, 7, 512, 3, 1, 1},
  };
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::printf("block %ld: direct tile vs winograd F(4x4,3x3), effective GFLOP/s\n",
              static_cast<long>(bl));
  for (int64_t batch : {1, 8}) {
    for (const Layer& l : layers) {
      NchwcConvShape s;
      s.n = batch, s.in_blocks = ceil_div(l.c, bl), s.b_in = bl, s.h = s.w = l.hw;
      s.out_blocks = ceil_div(l.o, bl), s.block = bl, s.kh = s.kw = 3;
      s.pad_t = s.pad_l = s.pad_b = s.pad_r = 1;
      WinogradConvShape ws;
      ws.n = batch, ws.in_blocks = s.in_blocks, ws.h = ws.w = l.hw, ws.out_blocks = s.out_blocks;
      ws.block = bl, ws.pad_t = ws.pad_l = ws.pad_b = ws.pad_r = 1;
      std::vector<float> x(static_cast<size_t>(batch * s.in_blocks * l.hw * l.hw * bl));
      std::vector<float> w(static_cast<size_t>(l.o * l.c * 9));
      for (float& v : x) v = d(rng);
      for (float& v : w) v = d(rng);
      // The direct tile's weights [O/B, C/B, 3, 3, B, B]; their values do not matter here.
      std::vector<float> wd(static_cast<size_t>(s.out_blocks * s.in_blocks * 9 * bl * bl));
      for (float& v : wd) v = d(rng);
      std::vector<float> u(static_cast<size_t>(winograd_weight_floats(l.o, l.c, bl)));
      winograd_transform_weights(l.o, l.c, bl, w.data(), u.data());
      std::vector<float> b(static_cast<size_t>(s.out_blocks * bl), 0.5f);
      std::vector<float> y(static_cast<size_t>(batch * s.out_blocks * l.hw * l.hw * bl));
      const ConvEpilogue ep{ConvActivation::kRelu};
      const double flops = 2.0 * batch * l.o * l.hw * l.hw * l.c * 9.0;
      const auto direct = [&] {
        conv2d_nchwc(s, x.data(), wd.data(), b.data(), nullptr, ep, y.data(), pool);
      };
      const auto wino = [&] {
        conv2d_winograd(ws, x.data(), u.data(), b.data(), nullptr, ep, y.data(), pool);
      };
      direct();
      wino();
      const int iters = std::max(3, static_cast<int>(1e9 / flops));
      double td = 1e9, tw = 1e9;
      for (int round = 0; round < 4; ++round) {
        td = std::min(td, best_time(iters, direct));
        tw = std::min(tw, best_time(iters, wino));
      }
      std::printf("batch %ld  %-18s direct %8.3f ms %6.1f GFLOP/s   "
                  "winograd %8.3f ms %6.1f GFLOP/s   x%.2f\n",
                  static_cast<long>(batch), l.name, td * 1e3, flops / td * 1e-9, tw * 1e3,
                  flops / tw * 1e-9, td / tw);
    }
  }
}

// Every ResNet-50 layer on the blocked direct tile, as the model's conv2d_nchwc runs it (the
// stem's 3 channels as plain NCHW input, b_in = 1).
void bench_nchwc(ThreadPool& pool) {
  const int64_t bl = nchwc_preferred_block();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::printf("block %ld: direct tile (conv2d_nchwc), GFLOP/s\n", static_cast<long>(bl));
  for (int64_t batch : {1, 8}) {
    for (const Layer& l : kResnetLayers) {
      const bool plain = l.c < bl;
      NchwcConvShape s;
      s.n = batch, s.b_in = plain ? 1 : bl, s.in_blocks = plain ? l.c : ceil_div(l.c, bl);
      s.h = s.w = l.hw, s.out_blocks = ceil_div(l.o, bl), s.block = bl, s.kh = s.kw = l.k;
      s.stride_h = s.stride_w = l.stride;
      s.pad_t = s.pad_l = s.pad_b = s.pad_r = l.pad;
      std::vector<float> x(static_cast<size_t>(batch * s.in_blocks * l.hw * l.hw * s.b_in));
      std::vector<float> w(static_cast<size_t>(s.out_blocks * s.in_blocks * l.k * l.k * s.b_in * bl));
      std::vector<float> b(static_cast<size_t>(s.out_blocks * bl), 0.5f);
      std::vector<float> y(static_cast<size_t>(batch * s.out_blocks * s.out_h() * s.out_w() * bl));
      for (float& v : x) v = d(rng);
      for (float& v : w) v = d(rng);
      const ConvEpilogue ep{ConvActivation::kRelu};
      const double flops = 2.0 * batch * l.o * s.out_h() * s.out_w() * static_cast<double>(l.c * l.k * l.k);
      const auto run = [&] { conv2d_nchwc(s, x.data(), w.data(), b.data(), nullptr, ep, y.data(), pool); };
      run();
      const int iters = std::max(3, static_cast<int>(1e9 / flops));
      double t = best_time(iters, run);
      std::printf("batch %ld  %-26s %8.3f ms  %7.1f GFLOP/s", static_cast<long>(batch), l.name,
                  t * 1e3, flops / t * 1e-9);
      if (plain || bl != 16 || !nchwc_bf16_runs(/*force=*/true)) {
        std::printf("\n");
        continue;
      }
      // The bf16 tile on the same shape (weights: any bf16 values in its pair order), rounds
      // interleaved with the f32 tile's; best of each.
      std::vector<uint16_t> w16(w.size());
      for (size_t i = 0; i < w.size(); ++i) w16[i] = f32_to_bf16(w[i]);
      const auto run16 = [&] {
        conv2d_nchwc_bf16(s, x.data(), w16.data(), b.data(), nullptr, ep, y.data(), pool);
      };
      run16();
      double t16 = best_time(iters, run16);
      for (int r = 0; r < 2; ++r) {
        t = std::min(t, best_time(iters, run));
        t16 = std::min(t16, best_time(iters, run16));
      }
      std::printf("  bf16 tile %8.3f ms  %7.1f GFLOP/s  %.2fx\n", t16 * 1e3, flops / t16 * 1e-9,
                  t / t16);
    }
  }
}

// bf16: the vdpbf16ps tile (set_conv_kernel(kAvx512)) against AMX (kAuto on an AMX CPU), 4
// interleaved pairs of rounds, best of each.
void bench_bf16(ThreadPool& pool) {
  set_conv_kernel(ConvKernelChoice::kAvx512);
  if (!conv_bf16_native()) {
    std::printf("bf16: no AVX512-BF16 here\n");
    return;
  }
  const bool amx = has_amx();
  std::printf("bf16 GFLOP/s: vdpbf16ps tile%s\n", amx ? " vs AMX tile" : " (no AMX here)");
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const auto fill = [&](auto& v) {
    for (auto& e : v) e = d(rng);
  };
  const auto race = [&](const char* name, double flops, const auto& f) {
    f();
    const int iters = std::max(3, static_cast<int>(4e9 / flops));
    double tv = 1e9, ta = 1e9;
    for (int round = 0; round < 4; ++round) {
      set_conv_kernel(ConvKernelChoice::kAvx512);
      tv = std::min(tv, best_time(iters, f));
      if (amx) {
        set_conv_kernel(ConvKernelChoice::kAuto);
        ta = std::min(ta, best_time(iters, f));
      }
    }
    std::printf("%-32s vdpbf16ps %8.3f ms %7.1f", name, tv * 1e3, flops / tv * 1e-9);
    if (amx) std::printf("   amx %8.3f ms %7.1f   x%.2f", ta * 1e3, flops / ta * 1e-9, tv / ta);
    std::printf("\n");
  };
  for (int64_t batch : {1, 8}) {
    for (const Layer& l : kResnetLayers) {
      const ConvShape s = layer_shape(l, batch);
      std::vector<float> x(static_cast<size_t>(s.n * s.c * s.h * s.w));
      std::vector<float> b(static_cast<size_t>(s.o));
      fill(x);
      fill(b);
      const std::vector<uint16_t> w(static_cast<size_t>(s.o * s.c * s.kh * s.kw), 0x3f00);  // 0.5
      std::vector<float> y(static_cast<size_t>(s.n * s.o * s.out_h() * s.out_w()));
      const ConvEpilogue ep{ConvActivation::kRelu};
      const double flops =
          2.0 * s.n * s.o * s.out_h() * s.out_w() * static_cast<double>(s.c * s.kh * s.kw);
      char name[64];
      std::snprintf(name, sizeof(name), "b%ld conv %s", static_cast<long>(batch), l.name);
      race(name, flops, [&] {
        conv2d_bf16(s, x.data(), w.data(), b.data(), nullptr, ep, y.data(), pool);
      });
    }
  }
  struct Mm {
    int64_t k, n;
  };
  for (int64_t batch : {1, 8}) {
    for (const Mm& mm : {Mm{768, 768}, Mm{768, 3072}, Mm{3072, 768}}) {
      const int64_t m = 128 * batch;
      std::vector<float> a(static_cast<size_t>(m * mm.k));
      fill(a);
      const std::vector<uint16_t> b(static_cast<size_t>(mm.k * mm.n), 0x3f00);
      std::vector<float> y(static_cast<size_t>(m * mm.n));
      char name[64];
      std::snprintf(name, sizeof(name), "b%ld matmul %ldx%ld by %ldx%ld", static_cast<long>(batch),
                    static_cast<long>(m), static_cast<long>(mm.k), static_cast<long>(mm.k),
                    static_cast<long>(mm.n));
      race(name, 2.0 * m * mm.k * mm.n,
           [&] { matmul_bf16(m, mm.k, mm.n, a.data(), b.data(), y.data(), pool); });
    }
  }
  set_conv_kernel(ConvKernelChoice::kAuto);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  if (argc > 2) {
    const std::string want = argv[2];
    for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
      if (isa_name(i) == want) set_isa(i);
    }
  }
  ThreadPool pool(threads);
  std::printf("threads %d, isa %s\n", pool.concurrency(), std::string(isa_name(active_isa())).c_str());
  if (argc > 3 && std::string(argv[3]) == "bf16") {
    bench_bf16(pool);
    return 0;
  }
  if (argc > 3 && std::string(argv[3]) == "nchwc") {
    bench_nchwc(pool);
    return 0;
  }
  bench_winograd(pool);
  if (argc > 3 && std::string(argv[3]) == "winograd") return 0;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t batch : {1, 8}) {
    for (const Layer& l : kResnetLayers) {
      const ConvShape s = layer_shape(l, batch);
      std::vector<float> x(static_cast<size_t>(s.n * s.c * s.h * s.w));
      std::vector<float> w(static_cast<size_t>(s.o * s.c * s.kh * s.kw));
      std::vector<float> b(static_cast<size_t>(s.o));
      for (float& v : x) v = d(rng);
      for (float& v : w) v = d(rng);
      for (float& v : b) v = d(rng);
      std::vector<float> y(static_cast<size_t>(s.n * s.o * s.out_h() * s.out_w()));
      const ConvEpilogue ep{ConvActivation::kRelu};
      const double flops =
          2.0 * s.n * s.o * s.out_h() * s.out_w() * static_cast<double>(s.c * s.kh * s.kw);
      conv2d(s, x.data(), w.data(), b.data(), nullptr, ep, y.data(), pool);  // warm
      int iters = std::max(3, static_cast<int>(2e9 / flops));
      double best = 1e9;
      for (int rep = 0; rep < 3; ++rep) {
        const double t0 = now();
        for (int i = 0; i < iters; ++i) {
          conv2d(s, x.data(), w.data(), b.data(), nullptr, ep, y.data(), pool);
        }
        best = std::min(best, (now() - t0) / iters);
      }
      std::printf("batch %ld  %-26s %8.3f ms  %7.1f GFLOP/s\n", static_cast<long>(batch), l.name,
                  best * 1e3, flops / best * 1e-9);
    }
  }
  return 0;
}
