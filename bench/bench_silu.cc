// silu_mul (kernels/cpu/silu_mul_cpu.h: the SiLU-mul op of every Llama MLP, the graph form) over
// rows where a third of the gates are large (~100, the "massive activations" some layers of
// large models carry), next to rows of ordinary gates, in the same run: e^-g below f32's normal
// range used to make denormals (a microcode assist per lane on Intel cores).
//
//   bench_silu [--reps N]
//
// 64 rows of 5632 (TinyLlama's MLP width), one thread, median of the repetitions.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/silu_mul_cpu.h"
#include "kernels/cpu/task_runner.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--reps N]\n", argv[0]);
      return 2;
    }
  }
  const int64_t n = 5632, rows = 64;
  std::vector<float> plain(static_cast<size_t>(rows * n)), big(plain.size());
  const std::vector<float> u(plain.size(), 1.0f);
  std::vector<float> y(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    plain[i] = static_cast<float>(i % 7) * 0.5f - 1.5f;
    big[i] = plain[i] + (i % 3 == 0 ? 100.0f : 0.0f);
  }
  sampan::cpu::SerialRunner serial;
  std::vector<double> tb, tp;
  for (int r = 0; r < reps + 2; ++r) {
    const double t0 = now_s();
    sampan::cpu::silu_mul(rows, n, big.data(), n, u.data(), n, y.data(), n, serial);
    const double t1 = now_s();
    sampan::cpu::silu_mul(rows, n, plain.data(), n, u.data(), n, y.data(), n, serial);
    const double t2 = now_s();
    if (r >= 2) {
      tb.push_back(t1 - t0);
      tp.push_back(t2 - t1);
    }
  }
  std::sort(tb.begin(), tb.end());
  std::sort(tp.begin(), tp.end());
  const double a = tb[tb.size() / 2] * 1e6, b = tp[tp.size() / 2] * 1e6;
  std::printf("silu_mul %ld x %ld: a third of the gates ~100 %.1f us, ordinary gates %.1f us, "
              "ratio %.2f\n",
              static_cast<long>(rows), static_cast<long>(n), a, b, a / b);
  return 0;
}
